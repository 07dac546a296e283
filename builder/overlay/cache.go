package overlay

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// cacheVersion is the version of a cache entry's format.
const cacheVersion = 1

// entry is one cached overlay: the answer of the builder model to one
// (code digest, proposal key), kept once it passed Validate.
type entry struct {
	Version int     `json:"version"`
	Code    string  `json:"code_digest"`
	Key     string  `json:"proposal_key"`
	Builder string  `json:"builder"`
	Overlay Overlay `json:"overlay"`
	Digest  string  `json:"overlay_digest"`
}

// Cache keeps overlays in a directory, one file per (code digest, proposal
// key), so that a proposal built again reuses its overlay instead of asking
// the model (and paying) again. Writes are atomic (a temporary file in the
// same directory, synced, then renamed); an entry is read back only when
// its key fields match and its overlay has its recorded digest, and the
// caller validates it again under the current limits. A damaged or foreign
// entry reads as a miss. Cache is safe for concurrent use by goroutines
// and processes (the last complete write wins).
type Cache struct {
	dir string
}

// NewCache returns a cache in dir, creating it (0700) when missing.
func NewCache(dir string) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("overlay: cache: %w", err)
	}
	return &Cache{dir: dir}, nil
}

// name is the file of (code, key): the hex SHA-256 of both.
func (c *Cache) name(code, key string) string {
	h := sha256.Sum256([]byte(code + "\x00" + key))
	return filepath.Join(c.dir, hex.EncodeToString(h[:])+".json")
}

// Get returns the overlay cached for (code, key) and the builder that
// wrote it; ok is false on a miss or an entry that fails its checks.
func (c *Cache) Get(code, key string) (o Overlay, builder string, ok bool, err error) {
	b, err := os.ReadFile(c.name(code, key))
	if errors.Is(err, fs.ErrNotExist) {
		return Overlay{}, "", false, nil
	}
	if err != nil {
		return Overlay{}, "", false, fmt.Errorf("overlay: cache: %w", err)
	}
	var e entry
	if json.Unmarshal(b, &e) != nil || e.Version != cacheVersion || e.Code != code || e.Key != key ||
		len(e.Overlay.Files) == 0 || e.Overlay.Digest() != e.Digest {
		return Overlay{}, "", false, nil
	}
	return e.Overlay, e.Builder, true, nil
}

// Put stores o for (code, key) atomically.
func (c *Cache) Put(code, key, builder string, o Overlay) error {
	b, err := json.Marshal(entry{Version: cacheVersion, Code: code, Key: key, Builder: builder, Overlay: o, Digest: o.Digest()})
	if err != nil {
		return fmt.Errorf("overlay: cache: %w", err)
	}
	f, err := os.CreateTemp(c.dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("overlay: cache: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, c.name(code, key))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("overlay: cache: %w", err)
	}
	return nil
}
