package corpus

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
)

// Sentinel errors of the package; test them with errors.Is.
var (
	// ErrCorpusMissing: the corpus file or directory does not exist or
	// cannot be read (for GOROOT corpora: GOROOT was not found).
	ErrCorpusMissing = errors.New("corpus: corpus missing")
	// ErrCorpusTooSmall: the corpus holds fewer bytes than Config.MinBytes
	// or too few to put at least one block into validation.
	ErrCorpusTooSmall = errors.New("corpus: corpus too small")
	// ErrInvalidConfig: a Config field is out of range.
	ErrInvalidConfig = errors.New("corpus: invalid config")
)

// Names of the built-in corpora.
const (
	Opticks  = "opticks"   // GOROOT/src/testdata/Isaac.Newton-Opticks.txt
	GoSource = "go-source" // a selection of .go files under GOROOT/src
	GoDoc    = "go-doc"    // the HTML documents under GOROOT/doc (the language specification, memory model, assembler guide)
)

// Kinds of text a corpus holds; a task describes its corpus by kind, never
// by a file path.
const (
	KindProse  = "prose"  // natural-language text
	KindCode   = "code"   // program source
	KindMarkup = "markup" // text with markup (HTML)
)

// KindOf returns the kind of a built-in corpus (Opticks: prose, GoSource:
// code, GoDoc: markup; a Debian corpus: its DebianSource.Kind) and "" for
// any other name (a caller's file, whose
// kind the caller states).
func KindOf(name string) string {
	switch name {
	case Opticks:
		return KindProse
	case GoSource:
		return KindCode
	case GoDoc:
		return KindMarkup
	}
	if src, ok := debianSource(name); ok {
		return src.Kind
	}
	return ""
}

// GoDocFiles are the documents of the GoDoc corpus, relative to GOROOT, in
// the order they are concatenated. Every Go distribution since Go 1.0 ships
// them; the corpus is about 350 KiB.
var GoDocFiles = []string{"doc/go_spec.html", "doc/go_mem.html", "doc/asm.html"}

// OpticksPath is the path of the Opticks text relative to GOROOT.
const OpticksPath = "src/testdata/Isaac.Newton-Opticks.txt"

// Config parameterises loading and splitting.
type Config struct {
	// GOROOT is the Go installation to read the built-in corpora from;
	// default "" = found automatically ($GOROOT, runtime.GOROOT(), then
	// `go env GOROOT`). Library choice: every Go installation ships both.
	GOROOT string
	// BlockSize is the split block length in symbols; default 1024.
	// Library choice: long enough that most validation windows lie inside
	// one block, short enough that validation samples the whole text.
	BlockSize int
	// ValEvery sends every ValEvery-th block (indices ValEvery−1,
	// 2·ValEvery−1, …) to validation; default 10 (a 90/10 split).
	ValEvery int
	// MinBytes is the smallest accepted corpus; default 16384. Library
	// choice: below this a validation set of a few blocks is too noisy.
	MinBytes int
	// GoSourceBudget is the size of the Go-source corpus in bytes; default
	// 1 MiB. Library choice: about twice the Opticks, quick to load.
	GoSourceBudget int
	// MaxFileBytes skips Go files larger than this; default 65536.
	// Library choice: keeps generated tables out of the corpus.
	MaxFileBytes int
	// ShareDir is the directory the Debian corpora (DebianSources) are
	// read from; default "" = /usr/share.
	ShareDir string
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{BlockSize: 1024, ValEvery: 10, MinBytes: 16 << 10, GoSourceBudget: 1 << 20, MaxFileBytes: 64 << 10}
}

// Validate reports the first out-of-range field, wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	switch {
	case c.BlockSize < 1:
		return fmt.Errorf("%w: BlockSize = %d, want ≥ 1", ErrInvalidConfig, c.BlockSize)
	case c.ValEvery < 2:
		return fmt.Errorf("%w: ValEvery = %d, want ≥ 2", ErrInvalidConfig, c.ValEvery)
	case c.MinBytes < 1:
		return fmt.Errorf("%w: MinBytes = %d, want ≥ 1", ErrInvalidConfig, c.MinBytes)
	case c.GoSourceBudget < 1:
		return fmt.Errorf("%w: GoSourceBudget = %d, want ≥ 1", ErrInvalidConfig, c.GoSourceBudget)
	case c.MaxFileBytes < 1:
		return fmt.Errorf("%w: MaxFileBytes = %d, want ≥ 1", ErrInvalidConfig, c.MaxFileBytes)
	}
	return nil
}

// Corpus is a loaded, folded text. It is immutable after loading.
type Corpus struct {
	Name    string // "opticks", "go-source", a Debian corpus's name or the file's path
	Symbols []byte // folded text, every value < Symbols; one symbol per original byte
	Digest  string // hex SHA-256 prefix of Symbols; changes when the text changes
	Files   int    // number of files read
}

// FromBytes folds raw into a corpus named name. It returns an error
// wrapping ErrCorpusTooSmall when raw is shorter than cfg.MinBytes or than
// cfg.ValEvery blocks (no validation block otherwise).
func FromBytes(name string, raw []byte, cfg Config) (*Corpus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	need := max(cfg.MinBytes, cfg.BlockSize*cfg.ValEvery)
	if len(raw) < need {
		return nil, fmt.Errorf("%w: %s has %d bytes, need at least %d", ErrCorpusTooSmall, name, len(raw), need)
	}
	sym := FoldBytes(raw)
	sum := sha256.Sum256(sym)
	return &Corpus{Name: name, Symbols: sym, Digest: hex.EncodeToString(sum[:8]), Files: 1}, nil
}

// File loads the text file at path.
func File(path string, cfg Config) (*Corpus, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorpusMissing, path, err)
	}
	return FromBytes(path, raw, cfg)
}

// LoadOpticks loads the Opticks text from GOROOT.
func LoadOpticks(cfg Config) (*Corpus, error) {
	root, err := goroot(cfg)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(OpticksPath)))
	if err != nil {
		return nil, fmt.Errorf("%w: opticks: %w", ErrCorpusMissing, err)
	}
	return FromBytes(Opticks, raw, cfg)
}

// LoadGoSource loads the Go-source corpus: every .go file under GOROOT/src
// outside testdata and vendor directories and no larger than
// cfg.MaxFileBytes, ordered by the SHA-256 of its slash-separated path
// relative to GOROOT/src (a deterministic shuffle that mixes packages), and
// taken in that order while the total stays within cfg.GoSourceBudget.
// The selection depends only on the installation's file set.
func LoadGoSource(cfg Config) (*Corpus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	root, err := goroot(cfg)
	if err != nil {
		return nil, err
	}
	src := filepath.Join(root, "src")
	type file struct {
		rel  string
		size int64
		key  [32]byte
	}
	var files []file
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || n == "vendor" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() == 0 || info.Size() > int64(cfg.MaxFileBytes) {
			return nil
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		files = append(files, file{rel: rel, size: info.Size(), key: sha256.Sum256([]byte(rel))})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: go-source: %w", ErrCorpusMissing, err)
	}
	sort.Slice(files, func(i, j int) bool {
		if c := strings.Compare(string(files[i].key[:]), string(files[j].key[:])); c != 0 {
			return c < 0
		}
		return files[i].rel < files[j].rel
	})
	raw := make([]byte, 0, cfg.GoSourceBudget)
	n := 0
	for _, f := range files {
		if len(raw)+int(f.size) > cfg.GoSourceBudget {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, filepath.FromSlash(f.rel)))
		if err != nil {
			return nil, fmt.Errorf("%w: go-source: %w", ErrCorpusMissing, err)
		}
		if len(raw)+len(b) > cfg.GoSourceBudget {
			continue
		}
		raw = append(raw, b...)
		n++
	}
	c, err := FromBytes(GoSource, raw, cfg)
	if err != nil {
		return nil, err
	}
	c.Files = n
	return c, nil
}

// LoadGoDoc loads the GoDoc corpus: the files of GoDocFiles under GOROOT,
// concatenated in that order. A missing file (a trimmed installation)
// returns an error wrapping ErrCorpusMissing that names the file and GOROOT.
func LoadGoDoc(cfg Config) (*Corpus, error) {
	root, err := goroot(cfg)
	if err != nil {
		return nil, err
	}
	var raw []byte
	for _, f := range GoDocFiles {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, fmt.Errorf("%w: go-doc: %s not found under GOROOT %s (set Config.GOROOT or $GOROOT to a full Go installation): %w",
				ErrCorpusMissing, f, root, err)
		}
		raw = append(raw, b...)
	}
	c, err := FromBytes(GoDoc, raw, cfg)
	if err != nil {
		return nil, err
	}
	c.Files = len(GoDocFiles)
	return c, nil
}

// Load loads a corpus by name: Opticks, GoSource, GoDoc, a Debian corpus
// (DebianSources, LoadDebian), or otherwise the path of a text file.
func Load(name string, cfg Config) (*Corpus, error) {
	switch name {
	case Opticks:
		return LoadOpticks(cfg)
	case GoSource:
		return LoadGoSource(cfg)
	case GoDoc:
		return LoadGoDoc(cfg)
	case "":
		return nil, fmt.Errorf("%w: empty corpus name", ErrCorpusMissing)
	}
	if _, ok := debianSource(name); ok {
		return LoadDebian(name, cfg)
	}
	return File(name, cfg)
}

// Split returns c's training and validation symbols under cfg's block
// interleaving (see the package function Split).
func (c *Corpus) Split(cfg Config) (train, val []byte) {
	return Split(c.Symbols, cfg.BlockSize, cfg.ValEvery)
}

// Split cuts sym into blocks of blockSize symbols (the last may be shorter)
// and sends block i to validation when i%valEvery == valEvery−1, to training
// otherwise; each side keeps the blocks in order. The result does not alias
// sym. It panics when blockSize < 1 or valEvery < 2.
func Split(sym []byte, blockSize, valEvery int) (train, val []byte) {
	if blockSize < 1 || valEvery < 2 {
		panic(fmt.Sprintf("corpus: Split(blockSize=%d, valEvery=%d)", blockSize, valEvery))
	}
	nVal := 0
	for i, lo := 0, 0; lo < len(sym); i, lo = i+1, lo+blockSize {
		if i%valEvery == valEvery-1 {
			nVal += min(blockSize, len(sym)-lo)
		}
	}
	train = make([]byte, 0, len(sym)-nVal)
	val = make([]byte, 0, nVal)
	for i, lo := 0, 0; lo < len(sym); i, lo = i+1, lo+blockSize {
		blk := sym[lo:min(lo+blockSize, len(sym))]
		if i%valEvery == valEvery-1 {
			val = append(val, blk...)
		} else {
			train = append(train, blk...)
		}
	}
	return train, val
}

// Slice returns a training slice of about n symbols of train: the blocks
// of blockSize symbols at evenly spaced block indices ⌊i·m/k⌋ (i = 0…k−1,
// k = ⌈n/blockSize⌉, m = the number of whole blocks), concatenated in order,
// so that a small slice samples the whole text rather than its opening
// pages. n ≤ 0 or n ≥ len(train) returns train itself. Because only
// training symbols are sliced, validation stays disjoint. The result is
// new unless it is train. It panics when blockSize < 1.
func Slice(train []byte, n, blockSize int) []byte {
	if blockSize < 1 {
		panic(fmt.Sprintf("corpus: Slice(blockSize=%d)", blockSize))
	}
	m := len(train) / blockSize
	k := (n + blockSize - 1) / blockSize
	if n <= 0 || n >= len(train) || k >= m {
		return train
	}
	out := make([]byte, 0, k*blockSize)
	for i := 0; i < k; i++ {
		b := i * m / k
		out = append(out, train[b*blockSize:(b+1)*blockSize]...)
	}
	return out
}

var (
	gorootOnce sync.Once
	gorootDir  string
)

// goroot returns cfg.GOROOT or the installation's GOROOT.
func goroot(cfg Config) (string, error) {
	if cfg.GOROOT != "" {
		return cfg.GOROOT, nil
	}
	gorootOnce.Do(func() { gorootDir = findGOROOT() })
	if gorootDir == "" {
		return "", fmt.Errorf("%w: GOROOT not found (set Config.GOROOT or $GOROOT)", ErrCorpusMissing)
	}
	return gorootDir, nil
}

// GOROOT returns the Go installation the built-in corpora are read from, or
// "" when none is found.
func GOROOT() string {
	r, _ := goroot(Config{})
	return r
}

func findGOROOT() string {
	if r := os.Getenv("GOROOT"); r != "" {
		return r
	}
	if r := runtime.GOROOT(); r != "" { //nolint:staticcheck // deliberate fallback; may be empty in trimmed binaries
		if _, err := os.Stat(filepath.Join(r, "src")); err == nil {
			return r
		}
	}
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
