// Package landlock turns an agent's file_access block into a Landlock
// ruleset and applies it to the calling process.
//
// The model (spec/meepagateway-isolation.md, "Seatbelt / Landlock"):
// deny beats allow_read_write beats allow_read; writes are denied unless
// allowed; dotfiles in the home directory are denied unless
// allow_home_dotfiles; TCP follows allow_network.
//
// Landlock can only grant. Everything not granted is denied, so a deny that
// lies outside every grant needs nothing. A deny inside a granted tree is
// expressed exactly: the tree itself is not granted; instead each entry along
// the path to the denied one is granted on its own, except the denied entry
// (and, recursively, the directories that lead to it, which are expanded the
// same way). The directories that were expanded keep no rights of their own:
// they cannot be listed, and nothing can be created in them; an entry
// created in one of them later inherits nothing. Symbolic links met during
// expansion grant nothing (Landlock checks the resolved target).
//
// Compile is pure apart from reading the filesystem (resolving symlinks and
// listing the directories it expands); Restrict applies a compiled Ruleset to
// the calling process and is called only by the short-lived child that then
// execs the agent loop, never by the long-lived runner.
package landlock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// FileAccess is the spec's file_access block (landlock.FileAccess is an alias
// of it). It is declared here so that the sandbox, which imports this
// package, never imports the runner.
type FileAccess struct {
	Unrestricted      bool     `json:"unrestricted"`
	AllowRead         []string `json:"allow_read,omitempty"`
	AllowReadWrite    []string `json:"allow_read_write,omitempty"`
	Deny              []string `json:"deny,omitempty"`
	AllowHomeDotfiles bool     `json:"allow_home_dotfiles"`
	AllowNetwork      bool     `json:"allow_network"`
	// HomeDir is the home directory whose dotfiles allow_home_dotfiles
	// governs: the real user's home on the host (the provider sets it);
	// empty means the runner's own $HOME.
	HomeDir string `json:"home_dir,omitempty"`
}

// Access is what a rule grants beneath its path.
type Access int

const (
	// Read grants reading files, listing directories and executing.
	Read Access = 1
	// ReadWrite adds writing, truncating, creating, removing and renaming.
	ReadWrite Access = 2
)

func (a Access) String() string {
	switch a {
	case Read:
		return "ro"
	case ReadWrite:
		return "rw"
	}
	return fmt.Sprintf("Access(%d)", int(a))
}

// Rule grants Access beneath Path.
type Rule struct {
	Path   string `json:"path"`
	Access Access `json:"access"`
	// File is true when Path is not a directory: Landlock accepts only the
	// file rights (read, write, truncate, execute) on such a rule.
	File bool `json:"file,omitempty"`
	// Literal paths are opened by the restricted child as written, not
	// resolved here: /proc/self must name the child, not the runner.
	Literal bool `json:"literal,omitempty"`
	// Why names the setting the rule comes from, for logs and tests.
	Why string `json:"why"`
}

// Ruleset is a compiled file_access block.
type Ruleset struct {
	Rules []Rule `json:"rules"`
	// DenyTCP handles TCP bind and connect with no port allowed
	// (allow_network = false).
	DenyTCP bool `json:"deny_tcp"`
	// Hide are denied paths inside granted trees that the restricted child
	// covers with an empty read-only mount before it restricts itself
	// (Spec.Hide); the trees around them are then granted whole.
	Hide []Hidden `json:"hide,omitempty"`
	// Notes record what the compiler dropped or expanded, for the log.
	Notes []string `json:"notes,omitempty"`
}

// Hidden is a denied path the child mounts over: an empty read-only tmpfs
// over a directory, an empty read-only file over anything else.
type Hidden struct {
	Path string `json:"path"`
	Dir  bool   `json:"dir,omitempty"`
}

// MinFSABI is the lowest Landlock ABI the file rules need: ABI 3 is the
// first that restricts truncate(2); below it an agent could truncate a file
// it may only read, so "writes are denied unless allowed" would not hold.
const MinFSABI = 3

// MinNetABI is the lowest Landlock ABI that can restrict TCP.
const MinNetABI = 4

// RequiredABI is the lowest ABI that enforces every rule of r.
func (r *Ruleset) RequiredABI() int {
	if r.DenyTCP {
		return MinNetABI
	}
	return MinFSABI
}

// ErrUnsupported is wrapped by the error Check returns when the kernel
// cannot enforce the rules.
var ErrUnsupported = errors.New("landlock unsupported")

// Check fails closed: it returns an error wrapping ErrUnsupported when a
// kernel with Landlock ABI abi cannot enforce r.
func (r *Ruleset) Check(abi int) error {
	need := r.RequiredABI()
	if abi >= need {
		return nil
	}
	what := "file access rules"
	if r.DenyTCP {
		what = "allow_network = false (TCP bind/connect rules)"
	}
	have := fmt.Sprintf("Landlock ABI %d", abi)
	if abi <= 0 {
		have = "no Landlock (not built into the kernel, not enabled in the lsm= boot list, or blocked by a seccomp profile)"
	}
	return fmt.Errorf("%w: %s need Landlock ABI %d or newer, and this kernel has %s; "+
		"refusing to run the agent unrestricted (use container mode, or set file_access.unrestricted = true to accept running without rules)",
		ErrUnsupported, what, need, have)
}

// SystemPath is a path the agent loop needs from the host system.
type SystemPath struct {
	Path   string
	Access Access
	// Literal: see Rule.Literal.
	Literal bool
}

// DefaultSystem is what the agent loop and its shell tool need: programs and
// shared libraries (read and execute), the resolver and TLS files, a few
// devices, and the process's own /proc entry. Missing paths are skipped.
var DefaultSystem = []SystemPath{
	{Path: "/bin", Access: Read},
	{Path: "/sbin", Access: Read},
	{Path: "/usr", Access: Read},
	{Path: "/lib", Access: Read},
	{Path: "/lib32", Access: Read},
	{Path: "/lib64", Access: Read},
	{Path: "/libx32", Access: Read},
	{Path: "/etc/resolv.conf", Access: Read},
	{Path: "/etc/hosts", Access: Read},
	{Path: "/etc/nsswitch.conf", Access: Read},
	{Path: "/etc/ssl", Access: Read},
	{Path: "/etc/ld.so.cache", Access: Read},
	// Shells write to /dev/null all the time (cmd >/dev/null); writing it
	// reaches nothing.
	{Path: "/dev/null", Access: ReadWrite},
	{Path: "/dev/zero", Access: Read},
	{Path: "/dev/urandom", Access: Read},
	{Path: "/dev/random", Access: Read},
	{Path: "/proc/self", Access: Read, Literal: true},
}

// Spec is the compiler's input.
type Spec struct {
	FileAccess FileAccess
	// Workspace is the agent's workspace; always read-write.
	Workspace string
	// TmpDir is the message's private TMPDIR; always read-write.
	TmpDir string
	// RunnerBinary is the agent-runner executable; read and execute.
	RunnerBinary string
	// Home is the real user's home directory whose dotfiles are denied
	// unless FileAccess.AllowHomeDotfiles; the caller fills it from
	// FileAccess.HomeDir or its own $HOME. Empty: no home rule.
	Home string
	// System overrides DefaultSystem when non-nil.
	System []SystemPath
	// Protect are denied like FileAccess.Deny whatever file_access says:
	// the runner's own files (its config holds the token, the API key and
	// the secrets, and other agents' configs lie beside it), which an
	// allow_read of "/" would otherwise hand to the agent in host mode.
	Protect []string
	// Hide: the child can mount over denied paths (it runs in a mount
	// namespace of its own, with the privilege to mount). A deny inside a
	// granted tree is then exact: the tree is granted whole and the denied
	// path is covered (Ruleset.Hide). Without it the tree is expanded
	// around the denied path (see the package doc). Denied paths that do
	// not exist yet, and paths reached through a symlink, are always
	// expanded around: there is nothing to mount over.
	Hide bool
	// Covered are denied paths that an empty read-only mount already covers
	// in this process's view (the runner container's deployment put it
	// there). A deny inside a granted tree that is covered is exact like a
	// hidden one, and the child has nothing to mount.
	Covered []string
}

// ExpandedDenies are the deny entries that lie strictly inside an
// allow_read or allow_read_write path, as written (plan time: nothing is
// resolved). They are exact where a mount covers them: the provider's
// runner container has an empty read-only mount over each that exists when
// it is deployed, and a runner with CAP_SYS_ADMIN (an external runner
// started as root) mounts over them in its child's namespace. Elsewhere
// (an external runner started as another user, a deny that did not exist
// at deploy time) the allow is expanded around each of them instead, so
// that the allowed directory itself cannot be listed or written directly.
// The provider warns about them at plan where it cannot know, and the
// runner logs the same text at start, so plan and runtime say the same
// thing.
//
// covered are denies that a mount of the deployment already covers (see
// Spec.Covered); they are exact and left out.
func ExpandedDenies(fa FileAccess, covered ...string) []string {
	var out []string
	for _, in := range DeniesInside(fa) {
		if slices.Contains(covered, in.Path) {
			continue
		}
		out = append(out, fmt.Sprintf("deny %q lies inside %s %q: without the privilege to mount over it "+
			"(a runner not running as root), %s is expanded around it, so %s itself can neither be listed "+
			"nor written directly; with it, %s stays whole and %s is hidden", in.Path, in.Field, in.Allow, in.Allow, in.Allow, in.Allow, in.Path))
	}
	return out
}

// InsideDeny is a deny entry strictly inside an allow entry.
type InsideDeny struct {
	Path  string // the deny entry, cleaned
	Field string // "allow_read" or "allow_read_write"
	Allow string // the allow entry it lies in, cleaned
}

// DeniesInside lists the deny entries that lie strictly inside an
// allow_read or allow_read_write entry, as written (nothing is resolved).
func DeniesInside(fa FileAccess) []InsideDeny {
	var out []InsideDeny
	for _, d := range fa.Deny {
		d = filepath.Clean(d)
		for _, l := range []struct {
			field string
			paths []string
		}{{"allow_read", fa.AllowRead}, {"allow_read_write", fa.AllowReadWrite}} {
			for _, a := range l.paths {
				if a = filepath.Clean(a); d != a && within(d, a) {
					out = append(out, InsideDeny{Path: d, Field: l.field, Allow: a})
				}
			}
		}
	}
	return out
}

type grant struct {
	path    string
	access  Access
	literal bool
	why     string
	// userAllow: the home dotfile rule applies (allow_read/allow_read_write);
	// built-in grants (workspace, system paths) are not subject to it.
	userAllow bool
}

// Compile builds the Ruleset for s. Relative paths are errors; paths are
// cleaned and their symlinks resolved. A deny that covers the workspace,
// the private TMPDIR or the runner binary is an error (they are always
// needed); a grant under or at a denied path is dropped; a grant holding a
// denied path is expanded (see the package doc).
func Compile(s Spec) (*Ruleset, error) {
	// Not agentspec.ValidateFileAccess: a hand-written config (deployment "external") may hold
	// `..` or a trailing slash, which are cleaned here; only relative paths
	// are refused, since they have no meaning for a service.
	for _, l := range []struct {
		field string
		paths []string
	}{{"allow_read", s.FileAccess.AllowRead}, {"allow_read_write", s.FileAccess.AllowReadWrite}, {"deny", s.FileAccess.Deny}} {
		for i, p := range l.paths {
			if !filepath.IsAbs(p) {
				return nil, fmt.Errorf("file_access.%s[%d] %q: the path must be absolute (start with /)", l.field, i, p)
			}
		}
	}
	if s.FileAccess.Unrestricted {
		return nil, errors.New("landlock: unrestricted file access has no ruleset")
	}
	c := &compiler{rs: &Ruleset{DenyTCP: !s.FileAccess.AllowNetwork}}
	// Denies first: the grants are checked against them.
	if err := c.resolveDenies(s); err != nil {
		return nil, err
	}
	if s.Hide {
		c.markHideable()
	}
	c.markCovered(s.Covered)
	grants, err := c.builtinGrants(s)
	if err != nil {
		return nil, err
	}
	// Trees the agent can write: a symlink in one of them is the agent's to
	// repoint between messages, so no rule may be made through it.
	for _, g := range grants {
		if g.access == ReadWrite {
			c.writable = append(c.writable, g.path)
		}
	}
	for _, p := range s.FileAccess.AllowReadWrite {
		if r, err := resolveExisting(p); err == nil {
			c.writable = append(c.writable, r)
		}
	}
	user, err := c.userGrants(s.FileAccess)
	if err != nil {
		return nil, err
	}
	for _, g := range append(grants, user...) {
		if err := c.add(g); err != nil {
			return nil, err
		}
	}
	c.finish()
	return c.rs, nil
}

// resolveDenies resolves the deny paths and the home directory whose
// dotfiles are denied.
func (c *compiler) resolveDenies(s Spec) error {
	for _, p := range append(slices.Clone(s.FileAccess.Deny), s.Protect...) {
		r, err := resolveMaybeMissing(p)
		if err != nil {
			return fmt.Errorf("file_access.deny %q: %w", p, err)
		}
		c.deny = append(c.deny, r)
		// The path as written is denied too: when it goes through a
		// symlink inside an allowed tree, its parents are then expanded
		// and lose their write rights, so the agent cannot repoint the
		// link and make the deny miss its target at the next message.
		if lex := filepath.Clean(p); lex != r {
			c.deny = append(c.deny, lex)
			c.lexicalOnly = append(c.lexicalOnly, lex)
		}
	}
	if !s.FileAccess.AllowHomeDotfiles && s.Home != "" {
		h, err := resolveMaybeMissing(s.Home)
		if err != nil {
			return fmt.Errorf("home %q: %w", s.Home, err)
		}
		c.home = h
	}
	return nil
}

// builtinGrants are what every agent gets: its workspace and TMPDIR
// read-write, the runner binary and the system paths. A deny over one of
// the first three is an error, since the agent loop cannot run without it.
func (c *compiler) builtinGrants(s Spec) ([]grant, error) {
	var grants []grant
	for _, req := range []struct {
		path, what string
	}{{s.Workspace, "workspace"}, {s.TmpDir, "tmpdir"}} {
		if req.path == "" {
			continue
		}
		r, err := resolveExisting(req.path)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", req.what, req.path, err)
		}
		if d, ok := c.deniedAtOrAbove(r); ok {
			return nil, fmt.Errorf("file_access.deny %q covers the %s %s, which is always read-write", d, req.what, r)
		}
		grants = append(grants, grant{path: r, access: ReadWrite, why: req.what})
	}
	if s.RunnerBinary != "" {
		r, err := resolveExisting(s.RunnerBinary)
		if err != nil {
			return nil, fmt.Errorf("runner binary %q: %w", s.RunnerBinary, err)
		}
		if d, ok := c.deniedAtOrAbove(r); ok {
			return nil, fmt.Errorf("file_access.deny %q covers the runner binary %s, which the agent loop runs from", d, r)
		}
		grants = append(grants, grant{path: r, access: Read, why: "runner binary"})
	}
	system := s.System
	if system == nil {
		system = DefaultSystem
	}
	for _, sp := range system {
		if sp.Literal {
			grants = append(grants, grant{path: sp.Path, access: sp.Access, literal: true, why: "system"})
			continue
		}
		r, err := resolveExisting(sp.Path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("system path %q: %w", sp.Path, err)
		}
		grants = append(grants, grant{path: r, access: sp.Access, why: "system"})
	}
	return grants, nil
}

// userGrants are allow_read and allow_read_write, resolved; c.writable
// must be complete, since a path through a symlink the agent can change
// grants nothing.
func (c *compiler) userGrants(fa FileAccess) ([]grant, error) {
	var grants []grant
	for _, l := range []struct {
		field  string
		paths  []string
		access Access
	}{{"allow_read", fa.AllowRead, Read}, {"allow_read_write", fa.AllowReadWrite, ReadWrite}} {
		for _, p := range l.paths {
			r, err := resolveExisting(p)
			if errors.Is(err, fs.ErrNotExist) {
				// A missing path grants nothing, which is the safe side.
				c.note("%s %q does not exist; it grants nothing", l.field, p)
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("file_access.%s %q: %w", l.field, p, err)
			}
			if link, ok := c.swappableLink(p); ok {
				c.note("%s %q is dropped: it goes through the symlink %s, which the agent can change", l.field, p, link)
				continue
			}
			grants = append(grants, grant{path: r, access: l.access, why: l.field, userAllow: true})
		}
	}
	return grants, nil
}

type compiler struct {
	rs   *Ruleset
	deny []string
	// coveredDeny are the denies a mount of the deployment already covers
	// (Spec.Covered): they do not split the trees around them either.
	coveredDeny map[string]bool
	// hideable are the denies the child mounts over (Spec.Hide): they do
	// not make a grant expand.
	hideable map[string]Hidden
	// lexicalOnly are denies as written through a symlink; they are
	// always expanded around.
	lexicalOnly []string
	// writable are the roots of the trees the agent may write.
	writable []string
	// home is the resolved home directory whose dotfiles are denied to user
	// allows; empty when dotfiles are allowed.
	home  string
	rules map[string]Rule
}

// swappableLink finds a symlink on p's path (as written) that lies in a
// tree the agent can write.
func (c *compiler) swappableLink(p string) (string, bool) {
	cur := "/"
	for _, part := range strings.Split(filepath.Clean(p), "/") {
		if part == "" {
			continue
		}
		next := filepath.Join(cur, part)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", false
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		for _, w := range c.writable {
			if within(cur, w) {
				return next, true
			}
		}
		if cur, err = filepath.EvalSymlinks(next); err != nil {
			return "", false
		}
	}
	return "", false
}

func (c *compiler) note(format string, args ...any) {
	c.rs.Notes = append(c.rs.Notes, fmt.Sprintf(format, args...))
}

// deniedAtOrAbove reports the deny that is p or one of its ancestors.
func (c *compiler) deniedAtOrAbove(p string) (string, bool) {
	for _, d := range c.deny {
		if within(p, d) {
			return d, true
		}
	}
	return "", false
}

// isDenied: p itself is denied for g (an explicit deny at or above p, or a
// home dotfile for a user allow).
func (c *compiler) isDenied(p string, g grant) bool {
	if _, ok := c.deniedAtOrAbove(p); ok {
		return true
	}
	return g.userAllow && c.homeDotfile(p)
}

// homeDotfile: p is a dotfile of the home directory or beneath one
// (~/.ssh, ~/.config/app), and dotfiles are denied.
func (c *compiler) homeDotfile(p string) bool {
	if c.home == "" || !strings.HasPrefix(p, c.home+"/") {
		return false
	}
	first, _, _ := strings.Cut(strings.TrimPrefix(p, c.home+"/"), "/")
	return strings.HasPrefix(first, ".")
}

// holdsDenied: something strictly beneath p is denied for g, and is not
// hidden by a mount.
func (c *compiler) holdsDenied(p string, g grant) bool {
	for _, d := range c.deny {
		if _, hidden := c.hideable[d]; hidden || c.coveredDeny[d] {
			continue
		}
		if d != p && within(d, p) {
			return true
		}
	}
	// The home directory holds its dotfiles; an ancestor of it holds them
	// too.
	return g.userAllow && c.home != "" && within(c.home, p)
}

func (c *compiler) add(g grant) error {
	if c.rules == nil {
		c.rules = map[string]Rule{}
	}
	if g.literal {
		c.put(Rule{Path: g.path, Access: g.access, Literal: true, Why: g.why})
		return nil
	}
	if d, ok := c.deniedAtOrAbove(g.path); ok {
		c.note("%s %s is dropped: deny %s covers it", g.why, g.path, d)
		return nil
	}
	if g.userAllow && c.isDenied(g.path, g) {
		c.note("%s %s is dropped: it is a home dotfile and allow_home_dotfiles is false", g.why, g.path)
		return nil
	}
	return c.expand(g.path, g, 0)
}

// expand grants p, or, when p holds a denied path, grants p's entries one by
// one instead, recursing into the entries that lead to the denied path.
func (c *compiler) expand(p string, g grant, depth int) error {
	st, err := os.Stat(p)
	if depth > 0 && errors.Is(err, fs.ErrNotExist) {
		// An entry removed since its directory was listed (a busy /tmp)
		// grants nothing, which is the safe side.
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", g.why, p, err)
	}
	if !st.IsDir() || !c.holdsDenied(p, g) {
		c.put(Rule{Path: p, Access: g.access, File: !st.IsDir(), Why: g.why})
		return nil
	}
	if depth > 64 {
		return fmt.Errorf("%s %s: too deep while expanding around a denied path", g.why, p)
	}
	c.note("%s %s holds a denied path: granting its entries one by one; %s itself gets no rights (cannot be listed; new entries in it are not granted)", g.why, p, p)
	entries, err := os.ReadDir(p)
	if depth > 0 && errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s %s: list to expand around a denied path: %w", g.why, p, err)
	}
	for _, e := range entries {
		child := filepath.Join(p, e.Name())
		if c.isDenied(child, g) {
			continue
		}
		if e.Type()&fs.ModeSymlink != 0 {
			// Landlock checks the resolved target, so a rule on the link
			// would grant the target, which may be the denied path.
			continue
		}
		if err := c.expand(child, grant{path: child, access: g.access, why: g.why, userAllow: g.userAllow}, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func (c *compiler) put(r Rule) {
	if old, ok := c.rules[r.Path]; ok {
		if old.Access >= r.Access {
			return
		}
		r.Why = old.Why + "+" + r.Why
	}
	c.rules[r.Path] = r
}

// markHideable picks the denies a mount can cover: existing paths, not
// symbolic links, not reached through one (the resolved and the written path
// agree), and not the root.
func (c *compiler) markHideable() {
	c.hideable = map[string]Hidden{}
	for _, d := range c.deny {
		if d == "/" || slices.Contains(c.lexicalOnly, d) {
			continue
		}
		fi, err := os.Lstat(d)
		if err != nil || fi.Mode()&fs.ModeSymlink != 0 {
			continue
		}
		c.hideable[d] = Hidden{Path: d, Dir: fi.IsDir()}
	}
	// A deny written through a symlink stays expanded around (its parent
	// loses its write rights, so the link cannot be repointed); the path it
	// resolves to is hidden as well.
}

// markCovered records the denies that a mount already covers. Only exact
// deny paths count: a mount elsewhere hides nothing the rules rely on.
func (c *compiler) markCovered(covered []string) {
	for _, p := range covered {
		p = filepath.Clean(p)
		// A deny written through a symlink stays expanded around, covered
		// or not: its parent must not be granted whole (see markHideable).
		if slices.Contains(c.deny, p) && !slices.Contains(c.lexicalOnly, p) {
			if c.coveredDeny == nil {
				c.coveredDeny = map[string]bool{}
			}
			c.coveredDeny[p] = true
			delete(c.hideable, p) // nothing left for the child to mount
		}
	}
}

// hides lists the hideable denies a grant can reach, outermost only: a
// mount over D/secret also hides D/secret/key.
func (c *compiler) hides() []Hidden {
	var out []Hidden
	paths := make([]string, 0, len(c.hideable))
	for p := range c.hideable {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if len(out) > 0 && within(p, out[len(out)-1].Path) {
			continue
		}
		for _, r := range c.rs.Rules {
			if !r.Literal && !r.File && r.Path != p && within(p, r.Path) {
				out = append(out, c.hideable[p])
				break
			}
		}
	}
	return out
}

// finish drops rules that an ancestor rule already covers with at least the
// same access (Landlock unions rights down the tree) and sorts the rest.
func (c *compiler) finish() {
	paths := make([]string, 0, len(c.rules))
	for p := range c.rules {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		r := c.rules[p]
		if !r.Literal && c.covered(r) {
			continue
		}
		c.rs.Rules = append(c.rs.Rules, r)
	}
	c.rs.Hide = c.hides()
	for _, h := range c.rs.Hide {
		c.note("deny %s lies inside a granted tree: the child covers it with an empty read-only mount", h.Path)
	}
}

func (c *compiler) covered(r Rule) bool {
	for q := filepath.Dir(r.Path); ; q = filepath.Dir(q) {
		if a, ok := c.rules[q]; ok && !a.Literal && !a.File && a.Access >= r.Access {
			return true
		}
		if q == "/" {
			return false
		}
	}
}

// within reports whether p is dir or beneath it.
func within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

func resolveExisting(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("path must be absolute")
	}
	return filepath.EvalSymlinks(filepath.Clean(p))
}

// resolveMaybeMissing resolves the longest existing prefix of p and appends
// the rest, so that a deny for a path that does not exist yet still names
// where it would be created.
func resolveMaybeMissing(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("path must be absolute")
	}
	p = filepath.Clean(p)
	rest := ""
	for cur := p; ; {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if cur == "/" {
			return p, nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = filepath.Dir(cur)
	}
}
