package overlay

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/lm2lm/lm2lm/internal/oaichat"
	"github.com/lm2lm/lm2lm/records"
)

// Errors of the package, one per failure class of an overlay (docs/
// code-builder.md). Build returns them inside a *builder.RunError of class
// builder.ErrInfeasible, so errors.Is matches both the class and the cause.
var (
	// ErrBadAnswer: the model's answer is not one JSON object of the
	// answer's shape (files, or a reason it cannot implement the change).
	ErrBadAnswer = errors.New("overlay: bad answer")
	// ErrDeclined: the model answered that the change cannot be
	// implemented in the files it may change.
	ErrDeclined = errors.New("overlay: declined by the builder model")
	// ErrBadPath: a file path that is absolute, not clean, climbs out of
	// the code (".."), repeats, or is not on the allow-list.
	ErrBadPath = errors.New("overlay: path outside the allow-list")
	// ErrBadContent: a file that is not UTF-8 text, holds a NUL byte or a
	// carriage return that no line feed follows, is larger than
	// MaxFileBytes, or would replace a directory.
	ErrBadContent = errors.New("overlay: bad file content")
	// ErrTooLarge: the overlay changes more lines than MaxLines.
	ErrTooLarge = errors.New("overlay: too many changed lines")
	// ErrNoChange: the overlay leaves every file as it was.
	ErrNoChange = errors.New("overlay: changes nothing")
	// ErrSmoke: the overlaid code failed its smoke test.
	ErrSmoke = errors.New("overlay: smoke test failed")
	// ErrBaseSmoke: the unchanged code failed its own smoke test, so no
	// overlay's failure can be blamed on its proposal (class
	// builder.ErrFailed, never infeasible).
	ErrBaseSmoke = errors.New("overlay: the unchanged code fails its smoke test")
	// ErrBadCode: the code directory cannot be used (a symbolic link or
	// special file in it, unreadable, or an allow-list entry that is not a
	// clean relative path).
	ErrBadCode = errors.New("overlay: unusable code directory")
	// ErrNotOverlayJob: an Executor was given a job whose spec is not an
	// overlay job and it has no Plain executor.
	ErrNotOverlayJob = errors.New("overlay: not an overlay job")
)

// File is one whole file of an overlay: its path relative to the code
// directory, with '/' separators, and its complete new content.
type File struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// Overlay is a change to a code directory as whole files, each replacing
// an allow-listed file or adding one the allow-list names. It carries no
// modes, links or deletions, so it cannot make a file executable, point
// outside the code or remove anything.
type Overlay struct {
	Files []File `json:"files"`
}

// Digest returns "sha256:" and the hex SHA-256 of o's canonical JSON
// (files sorted by path), the overlay's identity in records and caches.
func (o Overlay) Digest() string {
	fs := slices.Clone(o.Files)
	slices.SortFunc(fs, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	b, _ := json.Marshal(Overlay{Files: fs}) // strings only: cannot fail
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// Answer is the builder model's answer: an overlay, or the reason it
// cannot implement the change.
type Answer struct {
	Files      []File `json:"files"`
	Infeasible string `json:"infeasible,omitempty"`
}

// MaxAnswerBytes bounds the answer ParseAnswer reads (oaichat.MaxJSONInput).
const MaxAnswerBytes = oaichat.MaxJSONInput

// ParseAnswer reads the model's answer s: exactly one JSON object
// {"files": [{"path", "content"}...], "infeasible": "..."} (prose or a code
// fence around it is ignored; a second object, a repeated or unknown key,
// a file without a path, or neither files nor a reason is ErrBadAnswer).
// A non-empty "infeasible" with no files is returned as is; the caller maps
// it to ErrDeclined. ParseAnswer is pure and never panics.
func ParseAnswer(s string) (Answer, error) {
	obj, err := oaichat.OneJSONObject(s)
	if err != nil {
		return Answer{}, fmt.Errorf("%w: %w", ErrBadAnswer, err)
	}
	dec := json.NewDecoder(strings.NewReader(obj))
	dec.DisallowUnknownFields()
	var a Answer
	if err := dec.Decode(&a); err != nil {
		return Answer{}, fmt.Errorf("%w: %v", ErrBadAnswer, err)
	}
	a.Infeasible = strings.TrimSpace(a.Infeasible)
	switch {
	case len(a.Files) == 0 && a.Infeasible == "":
		return Answer{}, fmt.Errorf("%w: no files and no reason", ErrBadAnswer)
	case len(a.Files) > 0 && a.Infeasible != "":
		return Answer{}, fmt.Errorf("%w: both files and a reason it is infeasible", ErrBadAnswer)
	}
	for i, f := range a.Files {
		if f.Path == "" {
			return Answer{}, fmt.Errorf("%w: file %d has no path", ErrBadAnswer, i)
		}
	}
	return a, nil
}

// Limits bound an overlay (Config carries them).
type Limits struct {
	// Allow lists the files an overlay may change or add, as clean
	// relative paths with '/' separators.
	Allow []string
	// MaxLines is the most changed lines (insertions plus deletions of a
	// minimal line diff, as git diff --numstat sums them) over all files:
	// the paper's bound on an overlay (METHOD.md §1 Vocabulary, Builder:
	// ≤ 400 lines).
	MaxLines int
	// MaxFileBytes bounds each file of the overlay.
	MaxFileBytes int
}

// Base is the content of the code's files that an overlay may touch: the
// allow-listed files that exist, by path, and every path of the code (to
// refuse a file where a directory is).
type Base struct {
	Files map[string]string // allow-listed existing files: path → content
	Dirs  map[string]bool   // every directory of the code, by path
}

// Checked is a validated overlay with what it changes.
type Checked struct {
	Overlay Overlay // files sorted by path, unchanged files dropped
	Lines   int     // changed lines (insertions + deletions)
	Diff    string  // unified diff against the base, paths a/… and b/…
	Digest  string  // Overlay.Digest()
}

// CleanPath reports why p cannot name a file inside the code: empty, not
// UTF-8, a NUL or backslash, absolute, a "." or ".." element, or not in
// path.Clean's form. "" means p is clean.
func CleanPath(p string) string {
	switch {
	case p == "":
		return "empty path"
	case !utf8.ValidString(p) || strings.ContainsAny(p, "\x00\\"):
		return "path holds a NUL, a backslash or invalid UTF-8"
	case strings.HasPrefix(p, "/"):
		return "absolute path"
	case path.Clean(p) != p:
		return "path is not clean"
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." || el == "." {
			return "path leaves the code directory"
		}
	}
	return ""
}

// Validate checks overlay o against base and lim before anything is
// written or run: every path clean and on the allow-list, no path twice,
// no file where the code has a directory, every content UTF-8 without NUL
// and without a lone carriage return (loneCR), at most MaxFileBytes, at
// least one line changed and at most MaxLines
// (METHOD.md §1 Vocabulary, Builder). The error wraps ErrBadPath,
// ErrBadContent, ErrTooLarge or ErrNoChange. Validate is pure.
func Validate(o Overlay, base Base, lim Limits) (Checked, error) {
	allow := make(map[string]bool, len(lim.Allow))
	for _, a := range lim.Allow {
		allow[a] = true
	}
	seen := map[string]bool{}
	var out Checked
	fs := slices.Clone(o.Files)
	slices.SortStableFunc(fs, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	for _, f := range fs {
		q := records.Excerpt(f.Path)
		if why := CleanPath(f.Path); why != "" {
			return Checked{}, fmt.Errorf("%w: %q: %s", ErrBadPath, q, why)
		}
		if !allow[f.Path] {
			return Checked{}, fmt.Errorf("%w: %q is not on the allow-list %q", ErrBadPath, q, lim.Allow)
		}
		if seen[f.Path] {
			return Checked{}, fmt.Errorf("%w: %q appears twice", ErrBadPath, q)
		}
		seen[f.Path] = true
		switch {
		case base.Dirs[f.Path]:
			return Checked{}, fmt.Errorf("%w: %q is a directory of the code", ErrBadContent, q)
		case len(f.Content) > lim.MaxFileBytes:
			return Checked{}, fmt.Errorf("%w: %q has %d bytes, max %d", ErrBadContent, q, len(f.Content), lim.MaxFileBytes)
		case !utf8.ValidString(f.Content) || strings.IndexByte(f.Content, 0) >= 0:
			return Checked{}, fmt.Errorf("%w: %q is not UTF-8 text without NUL bytes", ErrBadContent, q)
		case loneCR(f.Content) >= 0:
			return Checked{}, fmt.Errorf("%w: %q has a carriage return without a line feed at byte %d (Python ends a line there, the line count and a terminal would not)",
				ErrBadContent, q, loneCR(f.Content))
		}
		for dir := path.Dir(f.Path); dir != "."; dir = path.Dir(dir) {
			if _, isFile := base.Files[dir]; isFile {
				return Checked{}, fmt.Errorf("%w: %q needs %q to be a directory", ErrBadContent, q, dir)
			}
		}
		old, existed := base.Files[f.Path]
		if existed && old == f.Content {
			continue
		}
		left := lim.MaxLines - out.Lines
		ops, n, ok := diffLines(splitLines(old), splitLines(f.Content), left)
		if !ok {
			return Checked{}, fmt.Errorf("%w: more than %d lines changed (limit %d)", ErrTooLarge, lim.MaxLines, lim.MaxLines)
		}
		out.Lines += n
		out.Overlay.Files = append(out.Overlay.Files, f)
		out.Diff += unified(f.Path, existed, ops)
	}
	if out.Lines == 0 {
		return Checked{}, fmt.Errorf("%w: every file is as it was", ErrNoChange)
	}
	out.Digest = out.Overlay.Digest()
	return out, nil
}

// loneCR returns the offset of the first '\r' of s that no '\n' follows,
// or -1. Python (and its universal newlines) ends a line at a lone '\r' as
// at '\n' and "\r\n"; the overlay's lines are counted at '\n', so a lone
// '\r' would hide lines from the bound and, in the kept diff, make a
// terminal draw one line over another. Validate refuses it: the lines
// counted and shown are the lines that run.
func loneCR(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == '\r' && (i+1 == len(s) || s[i+1] != '\n') {
			return i
		}
	}
	return -1
}

// splitLines splits s after each '\n'; a last line without one is kept.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	out := strings.SplitAfter(s, "\n")
	if out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// op is one line of an edit script: ' ' kept, '-' deleted, '+' inserted.
type op struct {
	kind byte
	line string
}

// diffLines returns a minimal edit script from a to b and its number of
// insertions plus deletions, or ok false when that number exceeds max
// (Myers' O((N+M)·D) algorithm, stopped at D = max; memory O(D²)).
func diffLines(a, b []string, max int) (ops []op, n int, ok bool) {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	N, M := len(ma), len(mb)
	for _, l := range a[:pre] {
		ops = append(ops, op{' ', l})
	}
	if N+M > 0 {
		if max < 0 || N+M < 0 {
			return nil, 0, false
		}
		mid, d, found := myers(ma, mb, max)
		if !found {
			return nil, 0, false
		}
		ops, n = append(ops, mid...), d
	}
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, op{' ', l})
	}
	return ops, n, true
}

// myers is the edit script of a → b with D ≤ max edits, or found false.
func myers(a, b []string, max int) ([]op, int, bool) {
	N, M := len(a), len(b)
	limit := min(max, N+M)
	off := limit + 1
	v := make([]int, 2*limit+3)
	var trace [][]int
	for d := 0; d <= limit; d++ {
		trace = append(trace, slices.Clone(v[off-d-1:off+d+2]))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < N && y < M && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[off+k] = x
			if x >= N && y >= M {
				return backtrack(a, b, trace, d), d, true
			}
		}
	}
	return nil, 0, false
}

// backtrack walks the trace of myers back from (N, M) at distance d.
func backtrack(a, b []string, trace [][]int, d int) []op {
	x, y := len(a), len(b)
	var rev []op
	for ; d > 0; d-- {
		tv := trace[d] // v at the start of round d; index k+d+1 for k in [-d-1, d+1]
		k := x - y
		pk := k - 1
		if k == -d || (k != d && tv[k-1+d+1] < tv[k+1+d+1]) {
			pk = k + 1
		}
		px := tv[pk+d+1]
		py := px - pk
		// The snake after the move, then the move itself.
		for (pk == k+1 && x > px) || (pk == k-1 && x > px+1) {
			x, y = x-1, y-1
			rev = append(rev, op{' ', a[x]})
		}
		if pk == k+1 {
			rev = append(rev, op{'+', b[py]})
		} else {
			rev = append(rev, op{'-', a[px]})
		}
		x, y = px, py
	}
	for x > 0 && y > 0 {
		x, y = x-1, y-1
		rev = append(rev, op{' ', a[x]})
	}
	slices.Reverse(rev)
	return rev
}

// contextLines is the context of each hunk of a unified diff (diff -u's).
const contextLines = 3

// unified renders ops as a unified diff of file p (created when !existed).
func unified(p string, existed bool, ops []op) string {
	var b bytes.Buffer
	if existed {
		fmt.Fprintf(&b, "--- a/%s\n+++ b/%s\n", p, p)
	} else {
		fmt.Fprintf(&b, "--- /dev/null\n+++ b/%s\n", p)
	}
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		start := max(0, i-contextLines)
		end := i
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				end = j + 1
			} else if j-end >= 2*contextLines {
				break
			}
		}
		end = min(len(ops), end+contextLines)
		oldStart, newStart := 1, 1
		for _, o := range ops[:start] {
			if o.kind != '+' {
				oldStart++
			}
			if o.kind != '-' {
				newStart++
			}
		}
		oldN, newN := 0, 0
		for _, o := range ops[start:end] {
			if o.kind != '+' {
				oldN++
			}
			if o.kind != '-' {
				newN++
			}
		}
		if oldN == 0 {
			oldStart--
		}
		if newN == 0 {
			newStart--
		}
		fmt.Fprintf(&b, "@@ -%d,%d +%d,%d @@\n", oldStart, oldN, newStart, newN)
		for _, o := range ops[start:end] {
			b.WriteByte(o.kind)
			b.WriteString(o.line)
			if !strings.HasSuffix(o.line, "\n") {
				b.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i = end
	}
	return b.String()
}
