package grader

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/reward"
)

// maskBases are the folders the mask tests lay their files in: below /tmp
// (a private directory of the run, seen through read-only binds only) and
// below / (seen as the host's, read-only).
func maskBases(t *testing.T) map[string]string {
	t.Helper()
	tmp := t.TempDir()
	require.NoError(t, os.Chmod(tmp, 0o755))
	other, err := os.MkdirTemp("/", "lm2lm-mask-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(other) })
	require.NoError(t, os.Chmod(other, 0o755))
	return map[string]string{"tmp": tmp, "elsewhere": other}
}

// maskedData lays out base/data (a task's data, bound read-only) holding
// public.txt, heldout.txt and secret/s.txt, the last two to hide.
func maskedData(t *testing.T, base string) (data string, hide []string) {
	t.Helper()
	data = filepath.Join(base, "data")
	require.NoError(t, os.MkdirAll(filepath.Join(data, "secret"), 0o755))
	for name, body := range map[string]string{"public.txt": "public-P\n", "heldout.txt": "heldout-H\n", "secret/s.txt": "secret-S\n"} {
		require.NoError(t, os.WriteFile(filepath.Join(data, name), []byte(body), 0o644))
	}
	return data, []string{filepath.Join(data, "heldout.txt"), filepath.Join(data, "secret")}
}

// A hidden file or folder inside a read-only folder stays hidden wherever
// the folder lies: the masks are mounted after the read-only binds.
func TestSandboxMasksBelowReadOnly(t *testing.T) {
	needSandbox(t)
	s := newSandbox(t, nil)
	for name, base := range maskBases(t) {
		t.Run(name, func(t *testing.T) {
			data, hide := maskedData(t, base)
			dir := filepath.Join(base, "run")
			require.NoError(t, os.Mkdir(dir, 0o755))
			out := builder.NewTail(4 << 10)
			script := `cat ` + data + `/public.txt; cat ` + data + `/heldout.txt; cat ` + data + `/secret/s.txt; ls -a ` + data + `/secret | tr '\n' ' '; echo; echo done`
			_, err := s.Run(context.Background(), Command{Path: "/bin/sh", Args: []string{"-c", script}, Dir: dir,
				ReadOnly: []string{data}, Hide: hide, Stdout: out, Stderr: out})
			require.NoError(t, err)
			log := out.String()
			require.Contains(t, log, "public-P\n", log)
			require.Contains(t, log, "done", log)
			require.NotContains(t, log, "heldout-H", "the hidden file is empty")
			require.NotContains(t, log, "secret-S", "the hidden folder is empty")
			require.Contains(t, log, ". .. \n", "the hidden folder is empty")
		})
	}
}

// A hidden path inside the run directory is refused: its copy would be
// the run's.
func TestSandboxRefusesHiddenInRunDir(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.txt")
	require.NoError(t, os.WriteFile(secret, []byte("root only"), 0o600))
	s := newSandbox(t, func(c *SandboxConfig) { c.RequireIsolation, c.Isolate = false, false })
	for _, h := range []string{secret, dir + "/sub/../secret.txt", dir} {
		_, err := s.Run(context.Background(), Command{Path: "/bin/cat", Args: []string{"secret.txt"}, Dir: dir, Hide: []string{h}})
		require.ErrorIs(t, err, ErrBadCommand, h)
	}
	fi, err := os.Stat(secret)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "nothing ran, nothing was handed over")
}

// The grader's masks hold wherever the hidden paths lie: a task's Hide
// below /tmp and elsewhere, files and folders.
func TestGraderMasksEverywhere(t *testing.T) {
	needSandbox(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	tk := toyTask(t)
	openTask(t, tk)
	var reads []string
	for _, base := range maskBases(t) {
		_, hide := maskedData(t, base)
		tk.Hide = append(tk.Hide, hide...)
		reads = append(reads, hide[0], filepath.Join(hide[1], "s.txt"))
	}
	cfg := DefaultConfig()
	cfg.Timeout, cfg.RequireIsolation = 20*time.Second, true
	g, err := New(cfg, tk)
	require.NoError(t, err)
	code := `found = []
for p in ` + pyList(reads) + `:
    try:
        if open(p).read():
            found.append(p)
    except OSError:
        pass
if found:
    raise SystemExit("read " + " ".join(found))
` + solExact
	gr := gradeWithin(t, g, tk, code)
	require.Equal(t, reward.ValidSubmission, gr.Status, gr.Summary())
	require.InDelta(t, 1.0, gr.Metric, 1e-12)
}

// A hidden path that cannot be looked up (a symbolic link loop) or masked
// stops the run, even where RequireIsolation is off and a refused
// namespace would be dropped: the run never goes ahead with it unmasked.
func TestSandboxMaskFailsClosed(t *testing.T) {
	needSandbox(t)
	base := maskBases(t)["elsewhere"] // below /tmp it would be out of sight
	dir := filepath.Join(base, "run")
	require.NoError(t, os.Mkdir(dir, 0o755))
	loop := filepath.Join(base, "loop")
	require.NoError(t, os.Symlink(loop, loop))
	out := builder.NewTail(1 << 10)
	s := newSandbox(t, func(c *SandboxConfig) { c.RequireIsolation = false })
	r, err := s.Run(context.Background(), Command{Path: "/bin/sh", Args: []string{"-c", "echo ran"}, Dir: dir,
		Hide: []string{loop}, Stdout: out, Stderr: out})
	require.ErrorIs(t, err, ErrIsolation)
	require.ErrorContains(t, err, "hide "+loop)
	require.NotContains(t, out.String(), "ran")
	require.False(t, r.Sandbox.Mount)
}

// checkHidden accepts a path that is absent, an empty tmpfs folder or
// /dev/null, and nothing else.
func TestCheckHidden(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full")
	require.NoError(t, os.Mkdir(full, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(full, "f"), []byte("x"), 0o644))
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.Mkdir(empty, 0o755))
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	require.NoError(t, checkHidden(filepath.Join(dir, "absent")))
	require.NoError(t, checkHidden(filepath.Join(file, "below-a-file")))
	require.NoError(t, checkHidden("/dev/null"))
	require.ErrorIs(t, checkHidden(file), errNotMasked, "an empty regular file is not the mask")
	require.ErrorIs(t, checkHidden(full), errNotMasked)
	var fs unix.Statfs_t
	require.NoError(t, unix.Statfs(empty, &fs))
	if fs.Type != unix.TMPFS_MAGIC {
		require.ErrorIs(t, checkHidden(empty), errNotMasked, "an empty folder off a tmpfs is not the mask")
	}
	if os.Geteuid() == 0 {
		require.NoError(t, unix.Mount("tmpfs", empty, "tmpfs", unix.MS_RDONLY, "size=4k"))
		defer unix.Unmount(empty, 0)
		require.NoError(t, checkHidden(empty))
	}
}
