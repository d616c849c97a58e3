package agent

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
)

// Bounds on what the workspace can put into the system prompt, so a large
// file does not eat the model's context or the request budget.
const (
	maxSoulBytes       = 16 << 10
	maxMemoryBytes     = 16 << 10
	maxSkillBytes      = 4 << 10
	maxSkillsBytes     = 24 << 10
	maxSkills          = 32
	basePromptTemplate = `You are an agent. You run in a sandbox whose only persistent storage is your workspace, %s, which is also the current directory and HOME of every command you run.
Tools: shell (sh -c in the workspace), read_file, write_file and list_files (paths relative to the workspace; nothing outside it is reachable).
Work in small steps, check results, and finish with a plain-text answer for the user.`
)

// SystemPrompt builds the system prompt from the workspace: a fixed
// preamble, SOUL.md (who the agent is), MEMORY.md (what it keeps between
// conversations) and the skills under skills/ (skills/*.md and
// skills/<name>/SKILL.md), each cut at its bound. Files are read through the
// workspace root, so a symlink pointing outside is ignored.
func SystemPrompt(root *os.Root, workspace string) string {
	var b strings.Builder
	fmt.Fprintf(&b, basePromptTemplate, workspace)
	if s := readBounded(root, "SOUL.md", maxSoulBytes); s != "" {
		b.WriteString("\n\n# SOUL.md\n\n")
		b.WriteString(s)
	}
	if s := readBounded(root, "MEMORY.md", maxMemoryBytes); s != "" {
		b.WriteString("\n\n# MEMORY.md\n\n")
		b.WriteString(s)
	}
	skills := Skills(root)
	if len(skills) > 0 {
		b.WriteString("\n\n# Skills\n\nSkills available in the workspace (read the file for the whole text):")
		total := 0
		for _, sk := range skills {
			text := sk.Text
			if total+len(text) > maxSkillsBytes {
				text = "(not included: the skills budget is spent; read the file)"
			}
			total += len(text)
			fmt.Fprintf(&b, "\n\n## %s (%s)\n\n%s", sk.Name, sk.Path, text)
		}
	}
	return b.String()
}

// Skill is one skill file found in the workspace.
type Skill struct {
	Name string
	Path string // relative to the workspace
	Text string // cut at maxSkillBytes
}

// Skills lists skills/*.md and skills/<name>/SKILL.md, sorted by name, at
// most maxSkills.
func Skills(root *os.Root) []Skill {
	entries, err := fs.ReadDir(root.FS(), "skills")
	if err != nil {
		return nil
	}
	var out []Skill
	for _, e := range entries {
		var name, p string
		switch {
		case e.IsDir():
			name, p = e.Name(), path.Join("skills", e.Name(), "SKILL.md")
		case strings.HasSuffix(e.Name(), ".md"):
			name, p = strings.TrimSuffix(e.Name(), ".md"), path.Join("skills", e.Name())
		default:
			continue
		}
		text := readBounded(root, p, maxSkillBytes)
		if text == "" {
			continue
		}
		out = append(out, Skill{Name: name, Path: p, Text: text})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if len(out) > maxSkills {
		out = out[:maxSkills]
	}
	return out
}

// readBounded reads at most limit bytes of a regular file under root; a
// missing, unreadable or escaping file reads as "". O_NONBLOCK: a FIFO the
// agent left at SOUL.md would otherwise block every later message at open.
func readBounded(root *os.Root, name string, limit int) string {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }() // read-only
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(data[:min(len(data), limit)]))
	if len(data) > limit {
		s += "\n[cut at " + fmt.Sprint(limit) + " bytes]"
	}
	return s
}
