package overlay

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// base of the validator tests: two allow-listed files (one missing) and a
// directory.
var testBase = Base{
	Files: map[string]string{"train.py": "a\nb\nc\nd\ne\n"},
	Dirs:  map[string]bool{"lib": true},
}

var testLimits = Limits{Allow: []string{"train.py", "lib/new.py", "new.py", "lib"}, MaxLines: 4, MaxFileBytes: 64}

func TestValidate(t *testing.T) {
	// METHOD.md §1 Vocabulary, Builder: an overlay of at most N lines;
	// every expected count below is worked out by hand.
	tests := []struct {
		name  string
		files []File
		lines int
		err   error
	}{
		{"one line replaced", []File{{"train.py", "a\nB\nc\nd\ne\n"}}, 2, nil},
		{"one line added", []File{{"train.py", "a\nb\nc\nd\ne\nf\n"}}, 1, nil},
		{"two deleted", []File{{"train.py", "a\nd\ne\n"}}, 2, nil},
		{"new allowed file", []File{{"new.py", "x\ny\n"}}, 2, nil},
		{"new file in a new directory", []File{{"lib/new.py", "x\n"}}, 1, nil},
		{"newline at end removed", []File{{"train.py", "a\nb\nc\nd\ne"}}, 2, nil},
		{"exactly the limit", []File{{"train.py", "A\nB\nc\nd\ne\n"}}, 4, nil},
		{"over the limit", []File{{"train.py", "A\nB\nC\nd\ne\n"}}, 0, ErrTooLarge},
		{"over the limit across files", []File{{"train.py", "A\nB\nc\nd\ne\n"}, {"new.py", "x\n"}}, 0, ErrTooLarge},
		{"no change", []File{{"train.py", "a\nb\nc\nd\ne\n"}}, 0, ErrNoChange},
		{"absolute", []File{{"/etc/passwd", "x\n"}}, 0, ErrBadPath},
		{"climbs out", []File{{"../train.py", "x\n"}}, 0, ErrBadPath},
		{"climbs in and out", []File{{"lib/../train.py", "x\n"}}, 0, ErrBadPath},
		{"dot element", []File{{"./train.py", "x\n"}}, 0, ErrBadPath},
		{"backslash", []File{{`lib\new.py`, "x\n"}}, 0, ErrBadPath},
		{"not on the allow-list", []File{{"other.py", "x\n"}}, 0, ErrBadPath},
		{"twice", []File{{"new.py", "x\n"}, {"new.py", "y\n"}}, 0, ErrBadPath},
		{"NUL byte", []File{{"new.py", "x\x00\n"}}, 0, ErrBadContent},
		{"lone carriage return", []File{{"new.py", "x = 1\ry = 2\n"}}, 0, ErrBadContent},
		{"carriage return at the end", []File{{"new.py", "x = 1\r"}}, 0, ErrBadContent},
		{"statements joined by carriage returns", []File{{"new.py", strings.Repeat("x=1\r", 10) + "\n"}}, 0, ErrBadContent},
		{"CRLF lines counted", []File{{"new.py", "x\r\ny\r\n"}}, 2, nil},
		{"CRLF lines over the limit", []File{{"new.py", "a\r\nb\r\nc\r\nd\r\ne\r\n"}}, 0, ErrTooLarge},
		{"not UTF-8", []File{{"new.py", "x\xff\n"}}, 0, ErrBadContent},
		{"too big", []File{{"new.py", strings.Repeat("x", 65)}}, 0, ErrBadContent},
		{"replaces a directory", []File{{"lib", "x\n"}}, 0, ErrBadContent},
		{"under a file", []File{{"train.py/x", "x\n"}}, 0, ErrBadPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := testLimits
			if tt.name == "under a file" {
				lim.Allow = append(slices.Clone(lim.Allow), "train.py/x")
			}
			got, err := Validate(Overlay{Files: tt.files}, testBase, lim)
			if tt.err != nil {
				if tt.name == "under a file" {
					require.ErrorIs(t, err, ErrBadContent)
					return
				}
				require.ErrorIs(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.lines, got.Lines)
			require.Equal(t, got.Overlay.Digest(), got.Digest)
		})
	}
}

func TestUnifiedDiff(t *testing.T) {
	got, err := Validate(Overlay{Files: []File{{"train.py", "a\nb\nC\nd\ne\n"}, {"new.py", "x\n"}}}, testBase, testLimits)
	require.NoError(t, err)
	want := "--- /dev/null\n+++ b/new.py\n@@ -0,0 +1,1 @@\n+x\n" +
		"--- a/train.py\n+++ b/train.py\n@@ -1,5 +1,5 @@\n a\n b\n-c\n+C\n d\n e\n"
	require.Equal(t, want, got.Diff)
	require.Equal(t, 3, got.Lines)
}

// lcs is the slow, obvious longest common subsequence of a and b.
func lcs(a, b []string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				d[i][j] = 1 + d[i+1][j+1]
			} else {
				d[i][j] = max(d[i+1][j], d[i][j+1])
			}
		}
	}
	return d[0][0]
}

// The line diff is minimal (checked against the LCS on seeded random
// inputs) and its script rebuilds both sides.
func TestDiffLinesMinimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	gen := func() []string {
		out := make([]string, rng.IntN(12))
		for i := range out {
			out[i] = string(rune('a'+rng.IntN(3))) + "\n"
		}
		return out
	}
	for i := 0; i < 2000; i++ {
		a, b := gen(), gen()
		want := len(a) + len(b) - 2*lcs(a, b)
		ops, n, ok := diffLines(a, b, 100)
		require.True(t, ok)
		require.Equal(t, want, n, "%q → %q", a, b)
		var ra, rb []string
		for _, o := range ops {
			if o.kind != '+' {
				ra = append(ra, o.line)
			}
			if o.kind != '-' {
				rb = append(rb, o.line)
			}
		}
		require.Equal(t, strings.Join(a, ""), strings.Join(ra, ""))
		require.Equal(t, strings.Join(b, ""), strings.Join(rb, ""))
		if want > 0 {
			_, _, ok = diffLines(a, b, want-1)
			require.False(t, ok, "a bound below the distance must fail")
		}
	}
}

func TestParseAnswer(t *testing.T) {
	tests := []struct {
		in    string
		files int
		why   string
		err   error
	}{
		{`{"files": [{"path": "train.py", "content": "x\n"}]}`, 1, "", nil},
		{"Here it is:\n```json\n{\"files\": [{\"path\": \"a.py\", \"content\": \"\"}]}\n```", 1, "", nil},
		{`{"infeasible": "needs a second GPU"}`, 0, "needs a second GPU", nil},
		{`{"files": []}`, 0, "", ErrBadAnswer},
		{`{"files": [{"path": "a", "content": "x"}], "infeasible": "no"}`, 0, "", ErrBadAnswer},
		{`{"files": [{"content": "x"}]}`, 0, "", ErrBadAnswer},
		{`{"files": [{"path": "a", "content": "x", "mode": "0755"}]}`, 0, "", ErrBadAnswer},
		{`{"files": [], "files": []}`, 0, "", ErrBadAnswer},
		{`{"infeasible": "a"} {"infeasible": "b"}`, 0, "", ErrBadAnswer},
		{`no json`, 0, "", ErrBadAnswer},
	}
	for _, tt := range tests {
		a, err := ParseAnswer(tt.in)
		if tt.err != nil {
			require.ErrorIs(t, err, tt.err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Len(t, a.Files, tt.files)
		require.Equal(t, tt.why, a.Infeasible)
	}
}

// FuzzParseAnswer: whatever the model answers, ParseAnswer returns a
// classified error or an answer of the documented shape, and Validate
// accepts only overlays whose every path is clean and allow-listed.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{
		`{"files": [{"path": "train.py", "content": "a\nB\nc\nd\ne\n"}]}`,
		`{"files": [{"path": "../etc/passwd", "content": "x"}]}`,
		`{"files": [{"path": "/abs", "content": "x"}]}`,
		`{"files": [{"path": "lib/new.py", "content": "x\n"}, {"path": "new.py", "content": "y"}]}`,
		`{"infeasible": "no"}`, `{"files": null}`, "```{\"files\":[{\"path\":\"new.py\",\"content\":\"\\u0000\"}]}```",
		`{{{`, ``,
		`{"files": [{"path": "new.py", "content": "x = 1\ry = 2\rz = 3\n"}]}`,
		`{"files": [{"path": "new.py", "content": "x = 1\r\ny = 2\r\n"}]}`,
	} {
		f.Add(s)
	}
	allow := map[string]bool{}
	for _, a := range testLimits.Allow {
		allow[a] = true
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAnswer(s)
		if err != nil {
			if !errors.Is(err, ErrBadAnswer) {
				t.Fatalf("ParseAnswer(%q): unclassified error %v", s, err)
			}
			return
		}
		if (len(a.Files) == 0) == (a.Infeasible == "") {
			t.Fatalf("ParseAnswer(%q) = %+v: want files or a reason, not both", s, a)
		}
		chk, err := Validate(Overlay{Files: a.Files}, testBase, testLimits)
		if err != nil {
			for _, e := range []error{ErrBadPath, ErrBadContent, ErrTooLarge, ErrNoChange} {
				if errors.Is(err, e) {
					return
				}
			}
			t.Fatalf("Validate: unclassified error %v", err)
		}
		if chk.Lines < 1 || chk.Lines > testLimits.MaxLines {
			t.Fatalf("accepted %d changed lines", chk.Lines)
		}
		for _, f := range chk.Overlay.Files {
			if CleanPath(f.Path) != "" || !allow[f.Path] {
				t.Fatalf("accepted path %q", f.Path)
			}
			// The lines Python runs are the lines counted: no line end
			// but '\n' (alone or after '\r').
			if py := pythonLines(f.Content); py != len(splitLines(f.Content)) {
				t.Fatalf("accepted %q: Python sees %d lines, %d counted", f.Content, py, len(splitLines(f.Content)))
			}
		}
	})
}

// pythonLines counts the lines of s as Python's universal newlines do:
// each "\r\n", lone '\r' and '\n' ends one; a last line without an end
// counts.
func pythonLines(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\r':
			if i+1 < len(s) && s[i+1] == '\n' {
				i++
			}
			n++
		case '\n':
			n++
		}
	}
	if s != "" && s[len(s)-1] != '\n' && s[len(s)-1] != '\r' {
		n++
	}
	return n
}
