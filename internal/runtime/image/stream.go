package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/docker/docker/pkg/jsonmessage"
)

// ansi matches the colour codes the legacy builder wraps stderr in.
var ansi = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

// tailLines is how many build log lines a failed build's error carries.
const tailLines = 20

// readStream decodes a pull or build JSON stream, hands each output line to
// logf, and returns the aux image id, or an error that ends with the last
// lines of output.
func readStream(r io.Reader, logf func(string)) (string, error) {
	var tail []string
	keep := func(line string) {
		line = strings.TrimRight(ansi.ReplaceAllString(line, ""), " \r")
		if strings.TrimSpace(line) == "" {
			return
		}
		logf(line)
		tail = append(tail, line)
		if len(tail) > tailLines {
			tail = tail[1:]
		}
	}
	fail := func(err error) error {
		if len(tail) == 0 {
			return err
		}
		return fmt.Errorf("%w\n\nlast lines of the build log:\n%s", err, strings.Join(tail, "\n"))
	}
	dec := json.NewDecoder(r)
	var id string
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err == io.EOF {
			return id, nil
		} else if err != nil {
			return "", fail(fmt.Errorf("read build output: %w", err))
		}
		for _, line := range strings.Split(m.Stream, "\n") {
			keep(line)
		}
		if m.Status != "" {
			keep(strings.TrimSpace(m.ID + " " + m.Status))
		}
		if m.Error != nil {
			return "", fail(errors.New(m.Error.Message))
		}
		if m.Aux != nil {
			var aux struct{ ID string }
			if json.Unmarshal(*m.Aux, &aux) == nil && aux.ID != "" {
				id = aux.ID
			}
		}
	}
}
