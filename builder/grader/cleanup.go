package grader

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// removeRunDir removes a run directory and everything in it; a variable
// so that a test can make the removal fail.
var removeRunDir = removeTree

// removeTree removes dir and the tree below it, however deep. A run left
// that tree (without a mount namespace the run directory is on the host's
// file system), so it may be hundreds of thousands of directories deep:
// os.RemoveAll holds one descriptor per level and fails with "too many
// open files", and starves every other goroutine of descriptors while it
// tries. removeTree holds two descriptors at most: it walks down through
// openat and back up through "..", checking on each step up that it is
// back in the directory it came from, and keeps only the names of the
// subdirectories still to visit. Directories the run made unreadable are
// made readable (the grader may own them: a run as the grader's own user).
// It expects no process to change the tree meanwhile: every process of
// the run is gone.
func removeTree(dir string) error {
	err := walkRemove(dir)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return err
}

// level is a directory on the way down: its identity and the names of its
// subdirectories that are still to remove.
type level struct {
	dev, ino uint64
	dirs     []string
}

// walkRemove empties dir (see removeTree).
func walkRemove(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer func() { unix.Close(fd) }()
	top, err := emptyFiles(fd)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	stack := []level{top}
	for len(stack) > 0 {
		cur := &stack[len(stack)-1]
		if len(cur.dirs) == 0 { // fd is empty: go up and remove it
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return nil
			}
			up, err := unix.Openat(fd, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("%s: up %d levels: %w", dir, len(stack), err)
			}
			unix.Close(fd)
			fd = up
			parent := &stack[len(stack)-1]
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return err
			}
			if st.Dev != parent.dev || st.Ino != parent.ino {
				return fmt.Errorf("%s: the tree moved while it was removed", dir)
			}
			name := parent.dirs[len(parent.dirs)-1]
			parent.dirs = parent.dirs[:len(parent.dirs)-1]
			if err := unix.Unlinkat(fd, name, unix.AT_REMOVEDIR); err != nil {
				return fmt.Errorf("%s: rmdir at depth %d: %w", dir, len(stack), err)
			}
			continue
		}
		name := cur.dirs[len(cur.dirs)-1]
		err := unix.Unlinkat(fd, name, unix.AT_REMOVEDIR)
		if err == nil || errors.Is(err, unix.ENOENT) {
			cur.dirs = cur.dirs[:len(cur.dirs)-1]
			continue
		}
		if !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%s: rmdir at depth %d: %w", dir, len(stack), err)
		}
		down, err := openSubdir(fd, name)
		if err != nil {
			return fmt.Errorf("%s: open at depth %d: %w", dir, len(stack), err)
		}
		unix.Close(fd)
		fd = down
		lv, err := emptyFiles(fd)
		if err != nil {
			return fmt.Errorf("%s: at depth %d: %w", dir, len(stack), err)
		}
		stack = append(stack, lv)
	}
	return nil
}

// openSubdir opens the directory name below fd, first giving its owner
// read, write and search permission when it refuses.
func openSubdir(fd int, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	d, err := unix.Openat(fd, name, flags, 0)
	if errors.Is(err, unix.EACCES) {
		if err := unix.Fchmodat(fd, name, 0o700, 0); err != nil {
			return -1, err
		}
		d, err = unix.Openat(fd, name, flags, 0)
	}
	return d, err
}

// emptyFiles removes every entry of the directory fd that is not a
// directory and returns the directory's identity and the names of its
// subdirectories. It reads the directory through a duplicate of fd.
func emptyFiles(fd int) (level, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return level{}, err
	}
	lv := level{dev: st.Dev, ino: st.Ino}
	if st.Mode&0o700 != 0o700 {
		// Unlinking needs write and search permission: a grader that is
		// not root owns what its run made (root needs none of this; a
		// failure shows in the unlink below).
		_ = unix.Fchmod(fd, 0o700)
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return level{}, err
	}
	unix.CloseOnExec(dup)
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	for {
		ents, err := f.ReadDir(1024)
		for _, e := range ents {
			if e.IsDir() {
				lv.dirs = append(lv.dirs, e.Name())
				continue
			}
			if err := unix.Unlinkat(fd, e.Name(), 0); err != nil && !errors.Is(err, syscall.ENOENT) {
				if errors.Is(err, unix.EISDIR) {
					lv.dirs = append(lv.dirs, e.Name())
					continue
				}
				return level{}, fmt.Errorf("unlink %q: %w", e.Name(), err)
			}
		}
		if err != nil {
			break // io.EOF, or an error the next step reports
		}
	}
	return lv, nil
}
