package corpus_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/lab/corpus"
)

// fakeShare writes files (relative path → text) under a new directory,
// gzip-compressing those ending in ".gz".
func fakeShare(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for rel, text := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		b := []byte(text)
		if strings.HasSuffix(rel, ".gz") {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			_, err := zw.Write(b)
			require.NoError(t, err)
			require.NoError(t, zw.Close())
			b = buf.Bytes()
		}
		require.NoError(t, os.WriteFile(p, b, 0o644))
	}
	return dir
}

// text returns n bytes of text that name a file, so concatenation order shows.
func text(name string, n int) string {
	return strings.Repeat(name+" line\n", n/(len(name)+6)+1)[:n]
}

func TestLoadDebianFileListInOrder(t *testing.T) {
	src := debianSource(t, corpus.ManPagesVal)
	require.Equal(t, []string{"man/man1/bash.1.gz"}, src.Files)
	files := map[string]string{"man/man1/bash.1.gz": text(".TH BASH 1", 20000), "man/man1/other.1.gz": "x"}
	cfg := corpus.DefaultConfig()
	cfg.ShareDir = fakeShare(t, files)
	c, err := corpus.Load(corpus.ManPagesVal, cfg)
	require.NoError(t, err)
	require.Equal(t, corpus.FoldBytes([]byte(files["man/man1/bash.1.gz"])), c.Symbols, "decompressed, folded")
	require.Equal(t, 1, c.Files)
	require.Equal(t, corpus.ManPagesVal, c.Name)

	// The licences: seven files, concatenated in the listed order.
	src = debianSource(t, corpus.Licences)
	files = map[string]string{}
	var want []byte
	for _, f := range src.Files {
		files[f] = text(f, 3000)
		want = append(want, files[f]...)
	}
	cfg.ShareDir = fakeShare(t, files)
	c, err = corpus.LoadDebian(corpus.Licences, cfg)
	require.NoError(t, err)
	require.Equal(t, corpus.FoldBytes(want), c.Symbols)
	require.Equal(t, 7, c.Files)
}

func TestLoadDebianWalkSkipsAndSorts(t *testing.T) {
	files := map[string]string{
		"perl5/Debconf/Question.pm":          text("Question", 6000),
		"perl5/Debconf/Base.pm":              text("Base", 6000),
		"perl5/Debconf/FrontEnd/Noninter.pm": text("FrontEnd", 6000),
		"perl5/Debconf/README":               text("not perl", 6000),
		"perl5/Debconf/Element/Select.pm":    text("Select", 9000),
		"perl5/Debconf/Element/Web/Note.pm":  text("Note", 9000),
	}
	cfg := corpus.DefaultConfig()
	cfg.ShareDir = fakeShare(t, files)
	test, err := corpus.Load(corpus.DebconfPerl, cfg)
	require.NoError(t, err)
	// Lexical order of the slash paths: Base.pm, FrontEnd/…, Question.pm.
	want := files["perl5/Debconf/Base.pm"] + files["perl5/Debconf/FrontEnd/Noninter.pm"] + files["perl5/Debconf/Question.pm"]
	require.Equal(t, corpus.FoldBytes([]byte(want)), test.Symbols, "Element skipped, README not .pm")
	require.Equal(t, 3, test.Files)
	val, err := corpus.Load(corpus.DebconfPerlVal, cfg)
	require.NoError(t, err)
	want = files["perl5/Debconf/Element/Select.pm"] + files["perl5/Debconf/Element/Web/Note.pm"]
	require.Equal(t, corpus.FoldBytes([]byte(want)), val.Symbols)
	require.Equal(t, 2, val.Files)
}

func TestLoadDebianErrors(t *testing.T) {
	cfg := corpus.DefaultConfig()
	cfg.ShareDir = filepath.Join(t.TempDir(), "none")
	for _, src := range corpus.DebianSources {
		_, err := corpus.Load(src.Name, cfg)
		require.ErrorIs(t, err, corpus.ErrCorpusMissing, src.Name)
		require.ErrorContains(t, err, src.Package, src.Name)
	}
	_, err := corpus.LoadDebian("opticks", cfg)
	require.ErrorIs(t, err, corpus.ErrCorpusMissing)

	// One listed file missing: the error names it.
	files := map[string]string{}
	src := debianSource(t, corpus.LicencesVal)
	for _, f := range src.Files[1:] {
		files[f] = text(f, 3000)
	}
	cfg.ShareDir = fakeShare(t, files)
	_, err = corpus.Load(corpus.LicencesVal, cfg)
	require.ErrorIs(t, err, corpus.ErrCorpusMissing)
	require.ErrorContains(t, err, src.Files[0])

	// Too little text.
	cfg.ShareDir = fakeShare(t, map[string]string{"man/man1/bash.1.gz": "tiny"})
	_, err = corpus.Load(corpus.ManPagesVal, cfg)
	require.ErrorIs(t, err, corpus.ErrCorpusTooSmall)

	// Not gzip.
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "man/man1"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "man/man1/bash.1.gz"), []byte(text("plain", 20000)), 0o644))
	cfg.ShareDir = dir
	_, err = corpus.Load(corpus.ManPagesVal, cfg)
	require.ErrorIs(t, err, corpus.ErrCorpusMissing)
}

func TestDebianSourcesHalvesDisjoint(t *testing.T) {
	kinds := map[string]int{}
	var names []string
	for _, s := range corpus.DebianSources {
		require.Equal(t, s.Kind, corpus.KindOf(s.Name), s.Name)
		kinds[s.Kind]++
		names = append(names, s.Name)
	}
	require.Equal(t, map[string]int{corpus.KindProse: 2, corpus.KindCode: 2, corpus.KindMarkup: 2}, kinds)
	for _, n := range []string{corpus.Opticks, corpus.GoSource, corpus.GoDoc} {
		require.NotContains(t, names, n)
	}
	// Each kind's test and validation halves read disjoint files.
	var all []string
	for _, s := range corpus.DebianSources {
		for _, f := range s.Files {
			require.NotContains(t, all, f)
			all = append(all, f)
		}
	}
	perl := debianSource(t, corpus.DebconfPerl)
	require.Equal(t, "perl5/Debconf/Element", debianSource(t, corpus.DebconfPerlVal).Dir)
	require.Equal(t, []string{"Element"}, perl.Skip)
}

// TestDebianCorporaOnThisSystem loads the real files where the system has
// them (every Debian of the required packages; the manual pages are absent
// from images that exclude /usr/share/man).
func TestDebianCorporaOnThisSystem(t *testing.T) {
	cfg := corpus.DefaultConfig()
	seen := map[string]string{}
	for _, src := range corpus.DebianSources {
		c, err := corpus.Load(src.Name, cfg)
		if errors.Is(err, corpus.ErrCorpusMissing) {
			t.Logf("%s: not on this system: %v", src.Name, err)
			continue
		}
		require.NoError(t, err, src.Name)
		require.GreaterOrEqual(t, len(c.Symbols), 40<<10, src.Name)
		require.NotContains(t, seen, c.Digest, "%s repeats %s", src.Name, seen[c.Digest])
		seen[c.Digest] = src.Name
		train, val := c.Split(cfg)
		require.NotEmpty(t, val)
		require.Equal(t, len(c.Symbols), len(train)+len(val))
		t.Logf("%s: %d bytes, %d files, digest %s", src.Name, len(c.Symbols), c.Files, c.Digest)
	}
}

func debianSource(t *testing.T, name string) corpus.DebianSource {
	t.Helper()
	i := slices.IndexFunc(corpus.DebianSources, func(s corpus.DebianSource) bool { return s.Name == name })
	require.GreaterOrEqual(t, i, 0, name)
	return corpus.DebianSources[i]
}
