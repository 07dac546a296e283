package overlay_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/overlay"
)

// The documented shape, a read-only corpus folder with the held-out file
// hidden, keeps the held-out file hidden wherever the folder lies: below
// /tmp (a clone, a test's folder) and elsewhere.
func TestSandboxedOverlayHeldOutBelowReadOnly(t *testing.T) {
	requirePython(t)
	needSandbox(t)
	tmp := t.TempDir()
	require.NoError(t, os.Chmod(tmp, 0o755))
	for name, base := range map[string]string{"tmp": tmp, "elsewhere": outsideTmp(t)} {
		t.Run(name, func(t *testing.T) {
			data := filepath.Join(base, "data")
			writeFile(t, filepath.Join(data, "train.txt"), "train-T")
			writeFile(t, filepath.Join(data, "heldout.txt"), "heldout-H")
			require.NoError(t, os.Chmod(data, 0o755))
			code := filepath.Join(base, "code")
			writeFile(t, filepath.Join(code, "train.py"), "print('base')\n")
			sb, plain := sandboxed(t, t.TempDir(), func(c *overlay.SandboxConfig) {
				c.ReadOnly = []string{data}
				c.Hide = []string{filepath.Join(data, "heldout.txt")}
			})
			j := overlayJob(t, code, hostile(fmt.Sprintf(`assert open(%q).read() == "train-T"
data = open(%q).read()
assert data == "heldout-H", "read %%r" %% data`, filepath.Join(data, "train.txt"), filepath.Join(data, "heldout.txt"))))
			blocked(t, sb, j, "read ''")
			won(t, plain, j)
		})
	}
}

// A hidden file of the code folder is left out of every run's copy, by
// any runner; the code's digest still counts it.
func TestHiddenCodeFileLeftOut(t *testing.T) {
	requirePython(t)
	code := filepath.Join(t.TempDir(), "code")
	writeFile(t, filepath.Join(code, "train.py"), "print('base')\n")
	writeFile(t, filepath.Join(code, "ref", "losses.json"), `{"1": 2.25}`)
	writeFile(t, filepath.Join(code, "keys.txt"), "sk-not-for-runs")
	attack := hostile(`import os
found = [p for p in ("keys.txt", "ref/losses.json") if os.path.exists(p)]
assert found, "nothing found"`)
	j := overlayJob(t, code, attack)
	hide := []string{filepath.Join(code, "keys.txt"), filepath.Join(code, "ref")}
	plain := subprocessExecutor(t, hide)
	blocked(t, plain, j, "nothing found")
	open := subprocessExecutor(t, nil)
	won(t, open, j)
	if os.Geteuid() == 0 {
		needSandbox(t)
		sb, _ := sandboxed(t, t.TempDir(), func(c *overlay.SandboxConfig) { c.Hide = hide })
		blocked(t, sb, j, "nothing found")
	}
}

// subprocessExecutor returns an executor over SubprocessRunner whose
// Sandbox.Hide is hide.
func subprocessExecutor(t *testing.T, hide []string) *overlay.Executor {
	t.Helper()
	sc := builder.DefaultSubprocessConfig()
	sc.Command = []string{python, "train.py"}
	cfg := overlay.DefaultSandboxConfig()
	cfg.Hide = hide
	ex, err := overlay.NewExecutor(overlay.ExecutorConfig{Runner: overlay.SubprocessRunner(sc), Sandbox: cfg, TempDir: t.TempDir()})
	require.NoError(t, err)
	return ex
}
