package corpus

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Names of the Debian corpora: text files that every Debian system ships
// in its required packages, none of which the V2 suite uses. Each comes in
// two disjoint halves, one for a validation split and one for a test
// split, so that test corpora are read by no other split.
const (
	// Licences is the test half of the licence texts of base-files
	// (/usr/share/common-licenses: GPL-3, LGPL-3, Apache-2.0, MPL-2.0,
	// GFDL-1.3, CC0-1.0, Artistic); prose.
	Licences = "debian-licences"
	// LicencesVal is the validation half (GPL-1, GPL-2, LGPL-2, LGPL-2.1,
	// MPL-1.1, GFDL-1.2, BSD); prose.
	LicencesVal = "debian-licences-val"
	// DebconfPerl is the test half of debconf's Perl modules: every .pm
	// file under /usr/share/perl5/Debconf outside its Element directory;
	// code.
	DebconfPerl = "debconf-perl"
	// DebconfPerlVal is the validation half: the .pm files under
	// /usr/share/perl5/Debconf/Element; code.
	DebconfPerlVal = "debconf-perl-val"
	// ManPages is the test half of the manual pages of essential packages,
	// gzip-compressed troff under /usr/share/man/man1 (dash, find, xargs,
	// tar, grep, sed, gzip, dpkg, dpkg-query); markup.
	ManPages = "man-pages"
	// ManPagesVal is the validation half: bash(1); markup.
	ManPagesVal = "man-pages-val"
)

// DebianSource is where a Debian corpus comes from: a fixed list of files,
// or every file with a suffix under a directory.
type DebianSource struct {
	Name string
	Kind string // KindProse, KindCode or KindMarkup
	// Package is the Debian package that ships the files (documentation).
	Package string
	// Files are paths relative to Config.ShareDir, concatenated in this
	// order; each must exist. Files ending in ".gz" are decompressed.
	Files []string
	// Dir, when Files is empty, is a directory relative to
	// Config.ShareDir whose files ending in Suffix are read in the
	// lexical order of their slash-separated paths, skipping the
	// subdirectories named in Skip.
	Dir, Suffix string
	Skip        []string
}

// DebianSources are the six Debian corpora, test half first within each
// kind. All come from packages of priority required (base-files, debconf,
// bash, dash, findutils, tar, grep, sed, gzip, dpkg), present on a
// debootstrap minimal system; the manual pages are absent from images
// built with dpkg's path-exclude of /usr/share/man (the "slim" images), and
// loading them there fails with ErrCorpusMissing naming the file.
var DebianSources = []DebianSource{
	{Name: Licences, Kind: KindProse, Package: "base-files",
		Files: prefixed("common-licenses/", "GPL-3", "LGPL-3", "Apache-2.0", "MPL-2.0", "GFDL-1.3", "CC0-1.0", "Artistic")},
	{Name: LicencesVal, Kind: KindProse, Package: "base-files",
		Files: prefixed("common-licenses/", "GPL-1", "GPL-2", "LGPL-2", "LGPL-2.1", "MPL-1.1", "GFDL-1.2", "BSD")},
	{Name: DebconfPerl, Kind: KindCode, Package: "debconf", Dir: "perl5/Debconf", Suffix: ".pm", Skip: []string{"Element"}},
	{Name: DebconfPerlVal, Kind: KindCode, Package: "debconf", Dir: "perl5/Debconf/Element", Suffix: ".pm"},
	{Name: ManPages, Kind: KindMarkup, Package: "dash, findutils, tar, grep, sed, gzip, dpkg",
		Files: prefixed("man/man1/", "dash.1.gz", "find.1.gz", "xargs.1.gz", "tar.1.gz", "grep.1.gz", "sed.1.gz",
			"gzip.1.gz", "dpkg.1.gz", "dpkg-query.1.gz")},
	{Name: ManPagesVal, Kind: KindMarkup, Package: "bash", Files: []string{"man/man1/bash.1.gz"}},
}

func prefixed(dir string, names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = dir + n
	}
	return out
}

// debianSource returns the source of a Debian corpus name.
func debianSource(name string) (DebianSource, bool) {
	for _, s := range DebianSources {
		if s.Name == name {
			return s, true
		}
	}
	return DebianSource{}, false
}

// shareDir returns cfg.ShareDir or its default.
func shareDir(cfg Config) string {
	if cfg.ShareDir != "" {
		return cfg.ShareDir
	}
	return "/usr/share"
}

// LoadDebian loads the Debian corpus name (one of DebianSources) from
// cfg.ShareDir. A missing file returns an error wrapping ErrCorpusMissing
// that names it; a name outside DebianSources wraps ErrCorpusMissing too.
func LoadDebian(name string, cfg Config) (*Corpus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	src, ok := debianSource(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q is not a Debian corpus", ErrCorpusMissing, name)
	}
	root := shareDir(cfg)
	files := src.Files
	if len(files) == 0 {
		var err error
		if files, err = walkSuffix(root, src); err != nil {
			return nil, err
		}
	}
	var raw []byte
	for _, f := range files {
		b, err := readMaybeGzip(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %s not found under %s (package %s): %w", ErrCorpusMissing, name, f, root, src.Package, err)
		}
		raw = append(raw, b...)
	}
	c, err := FromBytes(name, raw, cfg)
	if err != nil {
		return nil, err
	}
	c.Files = len(files)
	return c, nil
}

// walkSuffix lists src.Dir's files ending in src.Suffix, relative to root,
// in lexical order of their slash-separated paths.
func walkSuffix(root string, src DebianSource) ([]string, error) {
	dir := filepath.Join(root, filepath.FromSlash(src.Dir))
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			for _, s := range src.Skip {
				if p == filepath.Join(dir, s) {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(p, src.Suffix) {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s under %s (package %s): %w", ErrCorpusMissing, src.Name, src.Dir, root, src.Package, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: %s: no %s file under %s", ErrCorpusMissing, src.Name, src.Suffix, dir)
	}
	sort.Strings(files)
	return files, nil
}

// maxGunzip bounds a decompressed manual page (the largest, bash(1), is
// about 350 KiB).
const maxGunzip = 8 << 20

func readMaybeGzip(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil || !strings.HasSuffix(path, ".gz") {
		return b, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxGunzip+1))
	if err != nil {
		return nil, err
	}
	if len(out) > maxGunzip {
		return nil, fmt.Errorf("decompressed size above %d bytes", maxGunzip)
	}
	return out, nil
}
