package overlay

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// tree is a walk of a code directory: its regular files and directories
// by slash path (relative, sorted), refusing anything else.
type tree struct {
	files []string
	dirs  []string
}

// walk lists root's regular files and directories. A symbolic link,
// device, socket or pipe anywhere in it is ErrBadCode: the code must be
// plain files, so that a copy of it holds nothing that points elsewhere.
func walk(root string) (tree, error) {
	var t tree
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.Type().IsDir():
			if rel != "." {
				t.dirs = append(t.dirs, rel)
			}
		case d.Type().IsRegular():
			t.files = append(t.files, rel)
		default:
			return fmt.Errorf("%w: %s is not a regular file or directory (%v)", ErrBadCode, rel, d.Type())
		}
		return nil
	})
	if err != nil {
		return tree{}, fmt.Errorf("overlay: walk %s: %w", root, err)
	}
	slices.Sort(t.files)
	slices.Sort(t.dirs)
	return t, nil
}

// digestEntry adds one file to a code digest.
func digestEntry(h hash.Hash, rel string, exec bool, content hash.Hash) {
	mode := "-"
	if exec {
		mode = "x"
	}
	fmt.Fprintf(h, "%s\x00%s\x00%s\n", rel, mode, hex.EncodeToString(content.Sum(nil)))
}

// Digest returns the digest of the code directory root: "sha256:" and the
// hex SHA-256 over its regular files in path order, each as its slash path,
// whether any execute bit is set, and the SHA-256 of its content
// (directories are implied by their files; empty ones do not count). It is
// ErrBadCode when root holds anything but regular files and directories.
func Digest(root string) (string, error) {
	t, err := walk(root)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, rel := range t.files {
		f, err := os.Open(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return "", fmt.Errorf("overlay: digest: %w", err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return "", fmt.Errorf("overlay: digest: %w", err)
		}
		ch := sha256.New()
		_, err = io.Copy(ch, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("overlay: digest: %w", err)
		}
		digestEntry(h, rel, fi.Mode()&0o111 != 0, ch)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// copyTree copies the regular files and directories of src into dst (which
// must exist), keeping whether each file is executable (0755 or 0644,
// directories 0755), and returns the digest of src, computed from the
// bytes as they were read: a caller compares it with the digest the job
// was built against, so that a run can only use the code its record names.
// The files and directories whose slash path leave names (and what lies
// below them) count in the digest but are not written: hidden paths of
// the code that a run must not see in its copy either.
func copyTree(src, dst string, leave []string) (string, error) {
	t, err := walk(src)
	if err != nil {
		return "", err
	}
	left := func(rel string) bool {
		for _, l := range leave {
			if rel == l || strings.HasPrefix(rel, l+"/") {
				return true
			}
		}
		return false
	}
	for _, d := range t.dirs {
		if left(d) {
			continue
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.FromSlash(d)), 0o755); err != nil {
			return "", fmt.Errorf("overlay: copy: %w", err)
		}
	}
	h := sha256.New()
	for _, rel := range t.files {
		to := filepath.Join(dst, filepath.FromSlash(rel))
		if left(rel) {
			to = ""
		}
		if err := copyFile(h, filepath.Join(src, filepath.FromSlash(rel)), to, rel); err != nil {
			return "", err
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// hiddenBelow returns the paths of hide (absolute or relative to the
// working directory) that lie strictly below the code directory code, as
// slash paths relative to it.
func hiddenBelow(code string, hide []string) []string {
	root, err := filepath.Abs(code)
	if err != nil {
		return nil
	}
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	var out []string
	for _, h := range hide {
		abs, err := filepath.Abs(h)
		if err != nil {
			continue
		}
		if r, err := filepath.EvalSymlinks(abs); err == nil {
			abs = r
		}
		if rel, err := filepath.Rel(root, abs); err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			out = append(out, filepath.ToSlash(rel))
		}
	}
	return out
}

// copyFile hashes from into h (as rel) and copies it to to; "" = hash
// only.
func copyFile(h hash.Hash, from, to, rel string) error {
	in, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("overlay: copy: %w", err)
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return fmt.Errorf("overlay: copy: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s changed into a non-regular file", ErrBadCode, rel)
	}
	exec := fi.Mode()&0o111 != 0
	perm := os.FileMode(0o644)
	if exec {
		perm = 0o755
	}
	ch := sha256.New()
	if to == "" {
		if _, err := io.Copy(ch, in); err != nil {
			return fmt.Errorf("overlay: copy: %w", err)
		}
		digestEntry(h, rel, exec, ch)
		return nil
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("overlay: copy: %w", err)
	}
	_, err = io.Copy(io.MultiWriter(out, ch), in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("overlay: copy: %w", err)
	}
	digestEntry(h, rel, exec, ch)
	return nil
}

// applyFiles writes o's files into dir, a fresh copy of the code that
// holds only regular files and directories (copyTree). A file is created
// with mode 0644 or replaces a regular file keeping its mode; a missing
// parent directory is created 0755. Paths are checked again (CleanPath),
// and nothing is followed: a path whose existing entry or parent is not a
// regular file or directory fails with ErrBadPath.
func applyFiles(dir string, o Overlay) error {
	for _, f := range o.Files {
		if why := CleanPath(f.Path); why != "" {
			return fmt.Errorf("%w: %q: %s", ErrBadPath, f.Path, why)
		}
		full := filepath.Join(dir, filepath.FromSlash(f.Path))
		if !strings.HasPrefix(full, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("%w: %q leaves the code", ErrBadPath, f.Path)
		}
		for p := path.Dir(f.Path); p != "."; p = path.Dir(p) {
			fi, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(p)))
			if err == nil && !fi.IsDir() {
				return fmt.Errorf("%w: %q: %s is not a directory", ErrBadPath, f.Path, p)
			}
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("overlay: apply: %w", err)
		}
		perm := os.FileMode(0o644)
		if fi, err := os.Lstat(full); err == nil {
			if !fi.Mode().IsRegular() {
				return fmt.Errorf("%w: %q is not a regular file", ErrBadPath, f.Path)
			}
			perm = fi.Mode().Perm()
		}
		if err := os.WriteFile(full, []byte(f.Content), perm); err != nil {
			return fmt.Errorf("overlay: apply: %w", err)
		}
	}
	return nil
}

// readBase reads the allow-listed files of root that exist, and root's
// directories, for Validate and the prompt.
func readBase(root string, allow []string) (Base, error) {
	t, err := walk(root)
	if err != nil {
		return Base{}, err
	}
	b := Base{Files: map[string]string{}, Dirs: map[string]bool{}}
	for _, d := range t.dirs {
		b.Dirs[d] = true
	}
	for _, a := range allow {
		if _, ok := slices.BinarySearch(t.files, a); !ok {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(a)))
		if err != nil {
			return Base{}, fmt.Errorf("overlay: read %s: %w", a, err)
		}
		b.Files[a] = string(data)
	}
	return b, nil
}
