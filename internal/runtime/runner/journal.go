package runner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/relay"
)

// States of a journal record. A message is accepted before the runner
// acknowledges it, started before any sandbox sees it, and done with the
// answer it got.
const (
	journalAccepted = "accepted"
	journalStarted  = "started"
	journalDone     = "done"
)

// journalVersion is the record format; a record of another version is
// skipped like a corrupt one.
const journalVersion = 1

// record is one message in the journal: one file,
// <seq>-<message id>.json, whose zero-padded sequence number sorts the
// files in acceptance order. The message text is dropped once it is done.
type record struct {
	Version  int             `json:"v"`
	Seq      uint64          `json:"seq"`
	ID       string          `json:"message_id"`
	State    string          `json:"state"`
	Async    bool            `json:"async,omitempty"`
	KeyHash  string          `json:"idempotency_key_sha256,omitempty"`
	Parent   string          `json:"parent_message_id,omitempty"`
	Accepted time.Time       `json:"accepted_at"`
	Message  *MessageRequest `json:"message,omitempty"`
	BytesIn  int             `json:"bytes_in,omitempty"`
	Finished *time.Time      `json:"finished_at,omitempty"`
	Status   int             `json:"status,omitempty"`
	// Evicted marks a done record whose outcome was evicted before its
	// time: it has no Body, and answers 410 evicted until its time ends.
	Evicted bool `json:"evicted,omitempty"`
	// Body is the answer's JSON, as the blocking call wrote it (json.Marshal
	// output is compact, so embedding it changes no byte). It is the last
	// field, so it ends the file, where a kept outcome's body is read from.
	Body json.RawMessage `json:"body,omitempty"`

	// body is where the file holds Body; a record read from disk has Body
	// nil when it is larger than inlineOutcomeBytes.
	body *bodyRef
}

var journalFileRe = regexp.MustCompile(`^([0-9]{16})-(msg-[0-9a-f]{16})\.json$`)

// journal keeps each accepted message durably in a directory of its own:
// every change is a new file written, synced and renamed over the old one,
// and the directory synced, before the runner acts on it. A nil *journal
// is no journal: every method is a no-op.
type journal struct {
	dir string
	log hclog.Logger

	mu    sync.Mutex
	seq   uint64
	recs  map[string]*record // by message id
	sizes map[string]int64   // file size by message id
}

// openJournal opens (making it, 0700) the journal directory and returns
// its records in acceptance order. Leftover temporary files are removed; a
// file that cannot be read as a record is logged, renamed *.corrupt and
// skipped.
func openJournal(dir string, log hclog.Logger) (*journal, []record, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("journal: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("journal: %w", err)
	}
	if !fi.IsDir() {
		return nil, nil, fmt.Errorf("journal: %s is not a directory", dir)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		// It holds message text: nobody else reads it.
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, nil, fmt.Errorf("journal: %s has mode %o and cannot be made 0700: %w", dir, fi.Mode().Perm(), err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("journal: %w", err)
	}
	j := &journal{dir: dir, log: log, recs: map[string]*record{}, sizes: map[string]int64{}}
	var recs []record
	for _, e := range entries { // ReadDir sorts by name: acceptance order
		if r, ok := j.load(e); ok {
			recs = append(recs, r)
		}
	}
	return j, recs, nil
}

// load reads one directory entry as a record.
func (j *journal) load(e os.DirEntry) (record, bool) {
	name := e.Name()
	path := filepath.Join(j.dir, name)
	if strings.HasPrefix(name, ".tmp-") {
		// A write that a crash cut short: the rename never happened, so
		// nothing was acknowledged on it.
		if err := os.Remove(path); err != nil {
			j.log.Warn("journal: remove a leftover temporary file", "file", path, "error", err)
		}
		return record{}, false
	}
	if strings.HasSuffix(name, ".corrupt") || name == relay.BudgetFileName {
		return record{}, false
	}
	r, size, err := readRecord(path, name)
	if err == nil && r.State == journalDone && len(r.Body) > inlineOutcomeBytes {
		// Served from the file when asked for: a restart does not load the
		// kept outcomes into memory.
		r.Body = nil
	}
	if err != nil {
		j.log.Error("journal: skipping a record that cannot be read; it is kept as *.corrupt", "file", path, "error", err)
		if rerr := os.Rename(path, path+".corrupt"); rerr != nil {
			j.log.Error("journal: set the unreadable record aside", "file", path, "error", rerr)
		}
		return record{}, false
	}
	j.seq = max(j.seq, r.Seq)
	if r.State != journalDone {
		j.recs[r.ID] = &r
	}
	j.sizes[r.ID] = size
	return r, true
}

// readRecord reads and checks the record in path, whose name must match it.
func readRecord(path, name string) (record, int64, error) {
	m := journalFileRe.FindStringSubmatch(name)
	if m == nil {
		return record{}, 0, errors.New("not a journal file name (<seq>-<message id>.json)")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return record{}, 0, err
	}
	var r record
	if err := json.Unmarshal(raw, &r); err != nil {
		return record{}, 0, fmt.Errorf("not a JSON record: %w", err)
	}
	seq, _ := strconv.ParseUint(m[1], 10, 64)
	switch {
	case r.Version != journalVersion:
		return record{}, 0, fmt.Errorf("record version %d, want %d", r.Version, journalVersion)
	case r.Seq != seq || r.ID != m[2]:
		return record{}, 0, errors.New("the record's sequence number or message id is not its file name's")
	case r.State == journalDone && r.Finished == nil:
		return record{}, 0, errors.New("a done record without its finish time")
	case r.State == journalDone && !r.Evicted && !json.Valid(r.Body):
		return record{}, 0, errors.New("a done record without its answer")
	case r.State != journalDone && (r.Message == nil || strings.TrimSpace(r.Message.Text) == ""):
		return record{}, 0, fmt.Errorf("a %s record without its message", r.State)
	case r.State != journalDone && r.State != journalAccepted && r.State != journalStarted:
		return record{}, 0, fmt.Errorf("unknown state %q", r.State)
	}
	if r.State == journalDone && !r.Evicted {
		// The answer is read from the file where the runner wrote it: at
		// the end, before the closing brace.
		if r.body = bodyAt(path, raw, r.Body); r.body == nil {
			return record{}, 0, errors.New("the answer is not at the end of the record")
		}
	}
	return r, int64(len(raw)), nil
}

func (j *journal) fileName(r *record) string {
	return filepath.Join(j.dir, fmt.Sprintf("%016d-%s.json", r.Seq, r.ID))
}

// accept records p as accepted (started, when p already holds the turn)
// and numbers it; it returns once the record is on disk.
func (j *journal) accept(p *pending) error {
	if j == nil {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.seq++
	msg := p.msg
	state := journalAccepted
	if p.turnHeld {
		state = journalStarted
	}
	r := &record{Version: journalVersion, Seq: j.seq, ID: p.id, State: state, Async: p.async,
		KeyHash: p.keyHash, Parent: p.parent, Accepted: p.queuedAt.UTC(), Message: &msg, BytesIn: p.bytesIn}
	if _, err := j.writeLocked(r); err != nil {
		return err
	}
	j.recs[r.ID] = r
	return nil
}

// start records that message id is about to be handed to a sandbox.
func (j *journal) start(id string) error {
	if j == nil {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	r, ok := j.recs[id]
	if !ok {
		return fmt.Errorf("journal: no record of %s", id)
	}
	next := *r
	next.State = journalStarted
	if _, err := j.writeLocked(&next); err != nil {
		return err
	}
	*r = next
	return nil
}

// finish records message id done with res, at t, and says where its file
// holds res's body.
func (j *journal) finish(id string, res result, t time.Time) (*bodyRef, error) {
	if j == nil {
		return nil, nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	r, ok := j.recs[id]
	if !ok {
		return nil, fmt.Errorf("journal: no record of %s", id)
	}
	next := *r
	t = t.UTC()
	next.State, next.Message, next.Finished = journalDone, nil, &t
	next.Status, next.Body = res.status, json.RawMessage(bytes.TrimSuffix(res.body, []byte("\n")))
	raw, err := j.writeLocked(&next)
	if err != nil {
		return nil, err
	}
	delete(j.recs, id)
	// nil (not where it is read from): the store keeps the body itself.
	return bodyAt(j.fileName(&next), raw, next.Body), nil
}

// bodyAt is where the record raw, the file path, holds body: at its end,
// before the closing brace, where json.Marshal puts the last field; nil
// when it is not there.
func bodyAt(path string, raw, body []byte) *bodyRef {
	size, n := int64(len(raw)), int64(len(body))
	off := size - 1 - n
	if off < 0 || raw[size-1] != '}' || !bytes.Equal(raw[off:size-1], body) {
		return nil
	}
	return &bodyRef{path: path, off: off, n: n, record: size}
}

// bury rewrites message id's done record as evicted (see
// record.Evicted): its answer goes, its key, status and finish time stay,
// so that a restart still answers 410 evicted for it. No sync: a record
// that comes back whole after a crash is evicted again.
func (j *journal) bury(id string, t evicted, finished time.Time) {
	if j == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	matches, err := filepath.Glob(filepath.Join(j.dir, "*-"+id+".json"))
	var m []string
	if err == nil && len(matches) == 1 {
		m = journalFileRe.FindStringSubmatch(filepath.Base(matches[0]))
	}
	if m == nil {
		j.log.Warn("journal: no record of an evicted outcome", "message_id", id)
		return
	}
	seq, _ := strconv.ParseUint(m[1], 10, 64)
	f := finished.UTC()
	r := &record{Version: journalVersion, Seq: seq, ID: id, State: journalDone, KeyHash: t.keyHash,
		Finished: &f, Status: t.status, Evicted: true}
	if _, err := j.writeLocked(r); err != nil {
		j.log.Warn("journal: record an evicted outcome", "message_id", id, "error", err)
	}
}

// remove deletes message id's record for good: the directory is synced,
// so a message withdrawn before it ran cannot come back after a crash.
func (j *journal) remove(id string) error {
	if j == nil {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.unlinkLocked(id); err != nil {
		return err
	}
	return syncDir(j.dir)
}

// forget deletes message id's record without a sync (see settle).
func (j *journal) forget(id string) error {
	if j == nil {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.unlinkLocked(id)
}

// drop deletes a done record that is past its keeping bounds. No sync: a
// record that comes back after a crash is pruned again.
func (j *journal) drop(id string) {
	if err := j.forget(id); err != nil {
		j.log.Warn("journal: remove an expired record", "message_id", id, "error", err)
	}
}

func (j *journal) unlinkLocked(id string) error {
	matches, err := filepath.Glob(filepath.Join(j.dir, "*-"+id+".json"))
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	var errs []error
	for _, m := range matches {
		if err := os.Remove(m); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("journal: %w", err))
		}
	}
	delete(j.recs, id)
	delete(j.sizes, id)
	return errors.Join(errs...)
}

// stats are the records on disk and their bytes.
func (j *journal) stats() (records int, bytes int64) {
	if j == nil {
		return 0, 0
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, n := range j.sizes {
		bytes += n
	}
	return len(j.sizes), bytes
}

// writeLocked writes r durably: a new temporary file, synced, renamed over
// the record's file, and the directory synced. It returns what it wrote.
func (j *journal) writeLocked(r *record) (raw []byte, err error) {
	raw, err = json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	return raw, j.writeRawLocked(r, raw)
}

func (j *journal) writeRawLocked(r *record, raw []byte) (err error) {
	f, err := os.CreateTemp(j.dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreNotExist(os.Remove(f.Name())))
		}
	}()
	if _, err := f.Write(raw); err != nil {
		return errors.Join(fmt.Errorf("journal: %w", err), f.Close())
	}
	if err := f.Sync(); err != nil {
		return errors.Join(fmt.Errorf("journal: %w", err), f.Close())
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if err := os.Rename(f.Name(), j.fileName(r)); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	j.sizes[r.ID] = int64(len(raw))
	return syncDir(j.dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("journal: sync %s: %w", dir, err)
	}
	return nil
}

// sortByFinish orders done records by finish time (they finish in turn
// order, which is not always acceptance order).
func sortByFinish(recs []record) {
	sort.SliceStable(recs, func(a, b int) bool { return recs[a].Finished.Before(*recs[b].Finished) })
}

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
