package lm2lm_test

import (
	"bufio"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"unicode"

	"github.com/stretchr/testify/require"
)

// The documentation's own links: every relative link and image of README.md
// and docs/*.md names a file of the repository, and a link's #anchor names a
// heading of the Markdown file it points to, by GitHub's slug rules.

// docLink is one link or image target found in a Markdown file.
type docLink struct {
	Line   int    // 1-based line of the link in its file
	Target string // the destination as written, e.g. "docs/lab.md#kernels"
}

var (
	// fenceRE opens or closes a fenced code block (``` or ~~~).
	fenceRE = regexp.MustCompile("^\\s{0,3}(`{3,}|~{3,})")
	// inlineLinkRE matches [text](dest) and ![alt](dest), dest optionally in
	// angle brackets and followed by a title.
	inlineLinkRE = regexp.MustCompile(`!?\[[^\]]*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	// refDefRE matches a reference definition: [label]: dest.
	refDefRE = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	// imgSrcRE matches the src of an HTML <img>.
	imgSrcRE = regexp.MustCompile(`(?i)<img\b[^>]*\bsrc\s*=\s*["']([^"']+)["']`)
	// codeSpanRE matches an inline code span (one or more backticks).
	codeSpanRE = regexp.MustCompile("(`+)[^`]*?(`+)")
	// headingRE matches an ATX heading and captures its text.
	headingRE = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
)

// extractLinks returns every link, image and <img src> target of a Markdown
// text, skipping fenced code blocks and inline code spans, in order.
func extractLinks(text string) []docLink {
	var links []docLink
	forEachProseLine(text, func(n int, line string) {
		if m := refDefRE.FindStringSubmatch(line); m != nil {
			links = append(links, docLink{n, strings.Trim(m[1], "<>")})
			return
		}
		line = codeSpanRE.ReplaceAllString(line, " ") // a link never spans a code span
		for _, m := range inlineLinkRE.FindAllStringSubmatch(line, -1) {
			links = append(links, docLink{n, strings.Trim(m[1], "<>")})
		}
		for _, m := range imgSrcRE.FindAllStringSubmatch(line, -1) {
			links = append(links, docLink{n, m[1]})
		}
	})
	return links
}

// forEachProseLine calls f with every line outside fenced code blocks.
func forEachProseLine(text string, f func(n int, line string)) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	fence := ""
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			switch {
			case fence == "":
				fence = m[1]
				continue
			case m[1][0] == fence[0] && len(m[1]) >= len(fence):
				fence = ""
				continue
			}
		}
		if fence == "" {
			f(n, line)
		}
	}
}

// headingSlugs returns the anchors GitHub gives the headings of a Markdown
// text: the heading's text without inline markup, lower-cased, with every
// character but letters, marks, digits, connector punctuation (_), spaces
// and hyphens removed and each space turned into a hyphen; a repeated slug
// gets -1, -2, … in order.
func headingSlugs(text string) map[string]bool {
	slugs := map[string]bool{}
	seen := map[string]int{}
	forEachProseLine(text, func(_ int, line string) {
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			return
		}
		s := slug(m[1])
		if k := seen[s]; k > 0 {
			seen[s] = k + 1
			s = fmt.Sprintf("%s-%d", s, k)
		} else {
			seen[s] = 1
		}
		slugs[s] = true
	})
	return slugs
}

// linkTextRE matches a link or image inside a heading; only its text stays.
var linkTextRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// slug is GitHub's anchor of one heading's text.
func slug(heading string) string {
	heading = linkTextRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-', unicode.IsLetter(r), unicode.IsMark(r), unicode.IsNumber(r), unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// checkLinks checks every relative link of the Markdown files in fsys named
// by files and returns one line per broken link ("file:line: target: why").
func checkLinks(fsys fs.FS, files []string) ([]string, error) {
	var broken []string
	slugsOf := map[string]map[string]bool{}
	slugs := func(name string) (map[string]bool, error) {
		if s, ok := slugsOf[name]; ok {
			return s, nil
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		slugsOf[name] = headingSlugs(string(b))
		return slugsOf[name], nil
	}
	for _, name := range files {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		for _, l := range extractLinks(string(b)) {
			if why := checkLink(fsys, name, l.Target, slugs); why != "" {
				broken = append(broken, fmt.Sprintf("%s:%d: %s: %s", name, l.Line, l.Target, why))
			}
		}
	}
	return broken, nil
}

// checkLink says why one target of file name does not resolve ("" if it does).
func checkLink(fsys fs.FS, name, target string, slugs func(string) (map[string]bool, error)) string {
	u, err := url.Parse(target)
	if err != nil {
		return "unparseable: " + err.Error()
	}
	if u.Scheme != "" || u.Host != "" {
		if slices.Contains([]string{"http", "https", "mailto"}, u.Scheme) {
			return ""
		}
		return "scheme " + u.Scheme + " is neither relative nor http(s) or mailto"
	}
	file := name
	if u.Path != "" {
		if strings.HasPrefix(u.Path, "/") {
			file = path.Clean(strings.TrimPrefix(u.Path, "/"))
		} else {
			file = path.Join(path.Dir(name), u.Path)
		}
		if file == ".." || strings.HasPrefix(file, "../") {
			return "outside the repository"
		}
		if _, err := fs.Stat(fsys, file); err != nil {
			return "no such file " + file
		}
	}
	if u.Fragment == "" || !strings.HasSuffix(file, ".md") {
		return ""
	}
	s, err := slugs(file)
	if err != nil {
		return err.Error()
	}
	if !s[u.Fragment] {
		return "no heading #" + u.Fragment + " in " + file
	}
	return ""
}

// docFiles lists README.md and docs/*.md of fsys.
func docFiles(t *testing.T, fsys fs.FS) []string {
	t.Helper()
	files, err := fs.Glob(fsys, "docs/*.md")
	require.NoError(t, err)
	return append([]string{"README.md"}, files...)
}

func TestDocsLinks(t *testing.T) {
	fsys := os.DirFS(".")
	files := docFiles(t, fsys)
	require.Greater(t, len(files), 1, "docs/*.md")
	broken, err := checkLinks(fsys, files)
	require.NoError(t, err)
	require.Empty(t, broken, "broken links")
	// The check is not vacuous: the README links every docs page.
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	var targets []string
	for _, l := range extractLinks(string(b)) {
		targets = append(targets, strings.SplitN(l.Target, "#", 2)[0])
	}
	for _, f := range files[1:] {
		require.Contains(t, targets, f, "README.md links every docs page")
	}
}

func TestDocsReadmeLines(t *testing.T) {
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	n := strings.Count(string(b), "\n")
	require.LessOrEqual(t, n, 250, "README.md is a user's guide of at most 250 lines; the rest belongs in docs/")
}

func TestLinksExtract(t *testing.T) {
	text := strings.Join([]string{
		"# Title", // 1
		"See [the lab](docs/lab.md#kernels) and ![chart](docs/compare/a.png).", // 2
		"A [web link](https://go.dev) and [mail](mailto:a@b.c).",               // 3
		"Code `[not a link](nope.md)` stays code.",                             // 4
		"```go",                             // 5
		"x := a[i](b) // [fenced](nope.md)", // 6
		"```",                               // 7
		`<img src="docs/landscape.png" width="400">`,              // 8
		"[ref]: docs/METHOD.md",                                   // 9
		`[titled](<docs/a b.md> "Title") and [same file](#title)`, // 10
		"~~~",                 // 11
		"![hidden](nope.png)", // 12
		"~~~",                 // 13
	}, "\n")
	require.Equal(t, []docLink{
		{2, "docs/lab.md#kernels"},
		{2, "docs/compare/a.png"},
		{3, "https://go.dev"},
		{3, "mailto:a@b.c"},
		{8, "docs/landscape.png"},
		{9, "docs/METHOD.md"},
		{10, "docs/a b.md"},
		{10, "#title"},
	}, extractLinks(text))
}

func TestLinksHeadingSlugs(t *testing.T) {
	for heading, want := range map[string]string{
		"Where next":                                                  "where-next",
		"Evaluation semantics (`Evaluate`)":                           "evaluation-semantics-evaluate",
		"Measuring a world model: `examples/rwmeval`":                 "measuring-a-world-model-examplesrwmeval",
		"2026-12-01: Third look: the policy's hidden layer (5 seeds)": "2026-12-01-third-look-the-policys-hidden-layer-5-seeds",
		"Settling the nearest miss (`v2-val2`, 16 seeds)":             "settling-the-nearest-miss-v2-val2-16-seeds",
		"See [the lab](docs/lab.md) — σ_e × 2":                        "see-the-lab--σ_e--2",
		"Tiny-LM training core (`lab/model`)":                         "tiny-lm-training-core-labmodel",
	} {
		require.Equal(t, want, slug(heading), heading)
	}
	got := headingSlugs("# A\n## A\n```\n# A\n```\n### A ###\n#NotAHeading\n")
	require.Equal(t, map[string]bool{"a": true, "a-1": true, "a-2": true}, got)
}

func TestLinksBrokenFail(t *testing.T) {
	fsys := fstest.MapFS{
		"README.md": {Data: []byte("# Top\n[ok](docs/a.md#part-one) [up](#top) [img](docs/x.png)\n" +
			"[gone](docs/missing.md) [bad anchor](docs/a.md#part-two) [self](#nowhere)\n" +
			"[escape](../outside.md) [web](https://example.com/x.md) [code](lm2lm.go#L3)\n")},
		"docs/a.md":  {Data: []byte("# A\n## Part one\n[back](../README.md#top) [rooted](/docs/x.png)\n[lost](b.md)\n")},
		"docs/x.png": {Data: []byte{0x89}},
		"lm2lm.go":   {Data: []byte("package lm2lm\n")},
	}
	broken, err := checkLinks(fsys, []string{"README.md", "docs/a.md"})
	require.NoError(t, err)
	require.Equal(t, []string{
		"README.md:3: docs/missing.md: no such file docs/missing.md",
		"README.md:3: docs/a.md#part-two: no heading #part-two in docs/a.md",
		"README.md:3: #nowhere: no heading #nowhere in README.md",
		"README.md:4: ../outside.md: outside the repository",
		"docs/a.md:4: b.md: no such file docs/b.md",
	}, broken)
}

// FuzzLinksExtract: the extractor never panics, and every target it returns
// is written in the text (angle brackets aside) on the line it names.
func FuzzLinksExtract(f *testing.F) {
	for _, s := range []string{
		"[a](b.md)", "![x](y.png#z)", "```\n[a](b)\n```\n[c](d)", "`[a](b)` [c](<d e>)",
		`<img src='p.png'>`, "[r]: s.md", "[a](b \"t\")", "~~~~\n~~~\n[a](b)\n~~~~", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		lines := strings.Split(text, "\n")
		for _, l := range extractLinks(text) {
			if l.Line < 1 || l.Line > len(lines) {
				t.Fatalf("line %d of %d", l.Line, len(lines))
			}
			if !strings.Contains(lines[l.Line-1], l.Target) {
				t.Fatalf("target %q not on line %d %q", l.Target, l.Line, lines[l.Line-1])
			}
		}
	})
}
