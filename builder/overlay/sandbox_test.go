package overlay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/grader"
	"github.com/lm2lm/lm2lm/builder/overlay"
	"github.com/lm2lm/lm2lm/records"
)

// needSandbox skips a test unless this host can give the whole sandbox:
// root, and the namespaces (checked with unshare(1), the same kernel
// calls). A host without cgroups fails the test instead: the executor's
// probe refuses it.
func needSandbox(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the sandbox's per-run users and cgroups need root")
	}
	if err := exec.Command("unshare", "--pid", "--fork", "--net", "--mount", "--ipc", "true").Run(); err != nil {
		t.Skipf("the kernel refuses new PID, network, mount or IPC namespaces: %v", err)
	}
}

// outsideTmp makes a directory below the package's directory, where the
// sandbox's private /tmp does not hide it (every user may enter it), and
// removes it when t ends.
func outsideTmp(t *testing.T) string {
	t.Helper()
	// The package's own folder, unless the checkout lies in a folder the
	// sandbox replaces with a private tmpfs (a clone under /tmp): then a
	// folder of /var/lib that every user may traverse (the sandbox runs as
	// root, needSandbox).
	parent, err := filepath.Abs(".")
	require.NoError(t, err)
	for _, private := range []string{"/tmp", "/var/tmp", "/dev/shm", "/run"} {
		if parent == private || strings.HasPrefix(parent, private+"/") {
			parent = "/var/lib/lm2lm-sandbox-test"
			require.NoError(t, os.MkdirAll(parent, 0o755))
			require.NoError(t, os.Chmod(parent, 0o755))
			break
		}
	}
	d, err := os.MkdirTemp(parent, ".sandbox-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	require.NoError(t, os.Chmod(d, 0o755))
	abs, err := filepath.Abs(d)
	require.NoError(t, err)
	return abs
}

// hostile is an overlay of train.py that attacks, and reports through
// the protocol whether the attack worked: a loss (exit 0) when it did,
// infeasible "blocked: <exception>" (exit 3) when it did not.
func hostile(attack string) string {
	return `import json, sys
result = sys.argv[2]
try:
` + indent(attack) + `
except Exception as e:
    json.dump({"infeasible": "blocked: %s: %s" % (type(e).__name__, e)}, open(result, "w"))
    sys.exit(3)
json.dump({"loss": 0.5}, open(result, "w"))
`
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n")
}

// overlayJob is the overlay job that runs script as code's train.py.
func overlayJob(t *testing.T, code, script string) builder.Job {
	t.Helper()
	digest, err := overlay.Digest(code)
	require.NoError(t, err)
	files := []overlay.File{{Path: "train.py", Content: script}}
	raw, err := json.Marshal(overlay.Spec{Overlay: overlay.SpecVersion, Code: code, Digest: digest, Files: files,
		OvDigest: overlay.Overlay{Files: files}.Digest(), Inner: json.RawMessage(`{}`)})
	require.NoError(t, err)
	return builder.Job{Task: pyTask, Proposal: freeForm, Seed: 1, Spec: raw}
}

// sandboxed returns the default executor (the sandbox) over a copy dir
// below tmp, and the unsandboxed one over the same command, for the
// control runs.
func sandboxed(t *testing.T, tmp string, edit func(*overlay.SandboxConfig)) (sb, plain *overlay.Executor) {
	t.Helper()
	cfg := overlay.DefaultSandboxConfig()
	cfg.Command = []string{python, "train.py"}
	if edit != nil {
		edit(&cfg)
	}
	sb, err := overlay.NewExecutor(overlay.ExecutorConfig{Sandbox: cfg, TempDir: tmp})
	require.NoError(t, err)
	iso, ok := sb.Sandboxed()
	require.True(t, ok)
	require.True(t, iso.Network && iso.PID && iso.Mount && iso.UID > 0 && iso.Cgroup != "", "%+v", iso)
	sc := builder.DefaultSubprocessConfig()
	sc.Command = cfg.Command
	plain, err = overlay.NewExecutor(overlay.ExecutorConfig{Runner: overlay.SubprocessRunner(sc), TempDir: tmp})
	require.NoError(t, err)
	return sb, plain
}

// blocked runs j and requires an infeasible outcome whose reason holds
// want (the attack's exception).
func blocked(t *testing.T, ex *overlay.Executor, j builder.Job, want string) builder.Outcome {
	t.Helper()
	out, err := ex.Execute(context.Background(), j)
	require.ErrorIs(t, err, builder.ErrInfeasible, "log:\n%s", out.Log)
	require.Contains(t, out.Infeasible, want, "log:\n%s", out.Log)
	require.NotNil(t, out.Code, "the record names the overlay")
	t.Logf("blocked: %s", out.Infeasible)
	return out
}

// won runs j without the sandbox: the attack must work there, or the
// sandboxed run's failure would prove nothing.
func won(t *testing.T, ex *overlay.Executor, j builder.Job) {
	t.Helper()
	out, err := ex.Execute(context.Background(), j)
	require.NoError(t, err, "the attack fails even without the sandbox:\n%s", out.Log)
	require.Equal(t, 0.5, out.Loss)
}

// A hidden file (held-out data, reference results) that a run would
// read without the mask reads as missing.
func TestSandboxedOverlayReadsMasked(t *testing.T) {
	requirePython(t)
	needSandbox(t)
	out := outsideTmp(t)
	secret := filepath.Join(out, "hidden", "reference_losses.json")
	writeFile(t, secret, `{"1": 2.25} token-3c1f`)
	require.NoError(t, os.Chmod(filepath.Dir(secret), 0o755))
	code := filepath.Join(out, "code")
	writeFile(t, filepath.Join(code, "train.py"), "print('base')\n")
	sb, plain := sandboxed(t, t.TempDir(), func(c *overlay.SandboxConfig) { c.Hide = []string{filepath.Dir(secret)} })
	j := overlayJob(t, code, hostile(fmt.Sprintf(`data = open(%q).read()
assert "token-3c1f" in data, "read %%r" %% data`, secret)))
	blocked(t, sb, j, "FileNotFoundError")
	won(t, plain, j)
}

// A connection to a listener of the host's loopback fails: the run has
// no network.
func TestSandboxedOverlayNetwork(t *testing.T) {
	requirePython(t)
	needSandbox(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	out := outsideTmp(t)
	code := filepath.Join(out, "code")
	writeFile(t, filepath.Join(code, "train.py"), "print('base')\n")
	sb, plain := sandboxed(t, t.TempDir(), nil)
	j := overlayJob(t, code, hostile(fmt.Sprintf(`import socket
socket.create_connection(("127.0.0.1", %d), timeout=3).close()`, port)))
	blocked(t, sb, j, "blocked: OSError")
	require.Zero(t, accepted.Load(), "the listener accepted a connection from the sandbox")
	won(t, plain, j)
	require.Eventually(t, func() bool { return accepted.Load() == 1 }, 2*time.Second, 10*time.Millisecond)
}

// Writes outside the run's copy fail: into a world-writable directory of
// the host and into the code directory every copy is made from.
func TestSandboxedOverlayWritesOutside(t *testing.T) {
	requirePython(t)
	needSandbox(t)
	out := outsideTmp(t)
	code := filepath.Join(out, "code")
	writeFile(t, filepath.Join(code, "train.py"), "print('base')\n")
	// Both writable by every user: only the read-only view stops a run.
	require.NoError(t, os.Chmod(filepath.Join(code, "train.py"), 0o666))
	open := filepath.Join(out, "open")
	require.NoError(t, os.Mkdir(open, 0o777))
	require.NoError(t, os.Chmod(open, 0o777|os.ModeSticky))
	sb, plain := sandboxed(t, t.TempDir(), nil)
	for _, target := range []string{filepath.Join(open, "pwned"), filepath.Join(code, "train.py")} {
		t.Run(filepath.Base(target), func(t *testing.T) {
			j := overlayJob(t, code, hostile(fmt.Sprintf(`open(%q, "a").write("# pwned\n")`, target)))
			blocked(t, sb, j, "Read-only file system")
			b, _ := os.ReadFile(target)
			require.NotContains(t, string(b), "pwned")
			if target == filepath.Join(code, "train.py") {
				return // as root the control would spoil the code for the next run
			}
			won(t, plain, j)
			b, err := os.ReadFile(target)
			require.NoError(t, err)
			require.Contains(t, string(b), "pwned")
		})
	}
	b, err := os.ReadFile(filepath.Join(code, "train.py"))
	require.NoError(t, err)
	require.Equal(t, "print('base')\n", string(b))
}

// A fork bomb stops at the process limit, a memory hog is killed at the
// memory limit, a hang at the time limit; nothing of them is left on the
// host.
func TestSandboxedOverlayLimits(t *testing.T) {
	requirePython(t)
	needSandbox(t)
	out := outsideTmp(t)
	code := filepath.Join(out, "code")
	writeFile(t, filepath.Join(code, "train.py"), "print('base')\n")
	tmp := t.TempDir() // in every copy's path, so on every command line
	tests := []struct {
		name, attack string
		edit         func(*overlay.SandboxConfig)
		check        func(t *testing.T, out builder.Outcome, err error, wall time.Duration)
	}{
		{"fork bomb", `import os, time
for n in range(200):
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)`,
			func(c *overlay.SandboxConfig) { c.Limits.Processes = 32 },
			func(t *testing.T, out builder.Outcome, err error, _ time.Duration) {
				require.ErrorIs(t, err, builder.ErrInfeasible, out.Log)
				require.Contains(t, out.Infeasible, "blocked: BlockingIOError")
			}},
		{"memory hog", `blocks = []
for i in range(64):
    blocks.append(b"\x01" * (16 << 20))`,
			func(c *overlay.SandboxConfig) { c.Limits.Memory = 128 << 20 },
			func(t *testing.T, out builder.Outcome, err error, _ time.Duration) {
				require.ErrorIs(t, err, builder.ErrInfeasible, out.Log)
				require.ErrorIs(t, err, overlay.ErrOverMemory)
				require.Contains(t, out.Infeasible, "exceeded the memory limit of 134217728 bytes")
			}},
		{"hang", fmt.Sprintf(`import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", %q], start_new_session=True)
time.sleep(300)`, tmp),
			func(c *overlay.SandboxConfig) { c.Timeout = 2 * time.Second },
			func(t *testing.T, out builder.Outcome, err error, wall time.Duration) {
				require.ErrorIs(t, err, builder.ErrInfeasible, out.Log)
				require.ErrorIs(t, err, builder.ErrTimedOut)
				require.Equal(t, "timed out", out.Infeasible)
				require.Less(t, wall, 8*time.Second)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "hang" && testing.Short() {
				t.Skip("waits for the time limit; skipped with -short")
			}
			sb, _ := sandboxed(t, tmp, tt.edit)
			start := time.Now()
			o, err := sb.Execute(context.Background(), overlayJob(t, code, hostile(tt.attack)))
			tt.check(t, o, err, time.Since(start))
			t.Logf("%s: %v", tt.name, err)
			require.Empty(t, procsWith(tmp), "processes of the run left on the host")
		})
	}
}

// procsWith lists the host's processes whose command line holds s.
func procsWith(s string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.Contains(string(b), s) {
			out = append(out, pid)
		}
	}
	return out
}

// The honest run: examples/pytorch/train.py, overlaid with label
// smoothing by the builder, smoke-tested and trained for real through
// the sandbox, reading its training text through a read-only bind, its
// loss measured by examples/pytorch/evaluate.py (the trusted evaluator)
// from its checkpoint and the held-out text the run never saw; the loss
// is the one the same job gives without the sandbox and the evaluator,
// bit for bit (one CPU thread, a fixed seed).
func TestSandboxedOverlayTrains(t *testing.T) {
	if testing.Short() {
		t.Skip("four tiny PyTorch runs; skipped with -short")
	}
	requirePython(t)
	requireTorch(t)
	needSandbox(t)
	e := newPyEnv(t)
	e.base.splitHeldout(t)
	evaluator, err := os.ReadFile("../../examples/pytorch/evaluate.py")
	require.NoError(t, err)
	writeFile(t, filepath.Join(e.code, "evaluate.py"), string(evaluator)) // not on the allow-list
	scfg := overlay.DefaultSandboxConfig()
	scfg.Command = []string{python, "train.py"}
	scfg.ReadOnly = []string{e.base.corpus}
	scfg.Hide = []string{e.code} // the copies are made from it; no run needs it
	scfg.Eval = &overlay.EvalConfig{Command: []string{python, "evaluate.py"}, Code: e.code, ReadOnly: []string{e.base.heldout}}
	ex, err := overlay.NewExecutor(overlay.ExecutorConfig{Sandbox: scfg, Plain: e.exec, TempDir: filepath.Dir(e.code)})
	require.NoError(t, err)
	iso, ok := ex.Sandboxed()
	require.True(t, ok)
	t.Logf("sandbox: %+v", iso)
	cfg := e.config()
	cfg.Executor, cfg.CheckBase = ex, true
	b := e.builder(t, cfg)
	ctx := context.Background()

	old := "win[:, 1:].reshape(-1))\n        value = loss.item()"
	e.server.Push(answer(t, "train.py", e.edit(t, old, "win[:, 1:].reshape(-1), label_smoothing=0.1)\n        value = loss.item()")))
	j, err := b.Build(ctx, pyTask, freeForm)
	require.NoError(t, err)
	require.Equal(t, 2, e.ledger.Totals().Build.SmokeRuns, "the unchanged code's smoke test, then the overlay's, both sandboxed")
	start := time.Now()
	out, err := ex.Execute(ctx, j)
	inside := time.Since(start)
	require.NoError(t, err, out.Log)
	require.NotNil(t, out.Code)
	require.Positive(t, out.Cost.WallSeconds)
	start = time.Now()
	free, err := e.exec.Execute(ctx, j)
	require.NoError(t, err, free.Log)
	require.Equal(t, free.Loss, out.Loss, "the sandbox changes where the run may go, not what it computes")
	require.Contains(t, out.Log, "evaluate.py: ", "the evaluator measured the run")
	require.Contains(t, out.Log, "validation left to the evaluator", "the run did not see the held-out text")
	t.Logf("loss %.6f; the real run's Execute took %v sandboxed, %v unsandboxed", out.Loss, inside.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	// An overlay that trains as the unchanged code and reports a loss of
	// 0.5: recorded unsandboxed, where the script measures itself; with
	// the evaluator the loss is the unchanged code's, bit for bit.
	e.server.Push(answer(t, "train.py", e.edit(t, `out = {"loss": loss, "seeds": [seed]}`, `out = {"loss": 0.5, "seeds": [seed]}`)))
	forged := records.Proposal{Mechanism: records.FreeForm, Text: "Report a validation loss of 0.5."}
	j, err = b.Build(ctx, pyTask, forged)
	require.NoError(t, err)
	lie, err := e.exec.Execute(ctx, j)
	require.NoError(t, err, lie.Log)
	require.Equal(t, 0.5, lie.Loss, "unsandboxed, the script's word is the record")
	out, err = ex.Execute(ctx, j)
	require.NoError(t, err, out.Log)
	base, err := e.base.Build(ctx, pyTask, records.Proposal{Mechanism: records.NoChange})
	require.NoError(t, err)
	honest, err := e.exec.Execute(ctx, base)
	require.NoError(t, err, honest.Log)
	require.Equal(t, honest.Loss, out.Loss, "the evaluator measures the weights, not the report")
	require.Contains(t, out.Log, "the script reported loss 0.5")
}

// Without the sandbox the default executor fails closed, unless the
// config allows the unsandboxed runner; a SandboxConfig that does not
// require isolation is refused.
func TestSandboxFailsClosed(t *testing.T) {
	cfg := overlay.DefaultSandboxConfig()
	cfg.Command = []string{python, "train.py"}
	lax := cfg
	lax.Limits.RequireIsolation = false
	_, err := overlay.NewExecutor(overlay.ExecutorConfig{Sandbox: lax})
	require.ErrorContains(t, err, "RequireIsolation")
	_, err = overlay.NewExecutor(overlay.ExecutorConfig{})
	require.ErrorContains(t, err, "Command")

	if os.Geteuid() == 0 {
		// As root the host gives everything here; an unprivileged user is
		// the host that cannot: run this test again as nobody.
		runAsNobody(t, "^TestSandboxFailsClosed$")
		return
	}
	requirePython(t)
	tmp := t.TempDir()
	_, err = overlay.NewExecutor(overlay.ExecutorConfig{Sandbox: cfg, TempDir: tmp})
	require.ErrorIs(t, err, grader.ErrIsolation)
	require.ErrorContains(t, err, "a user of the run's own")

	ex, err := overlay.NewExecutor(overlay.ExecutorConfig{Sandbox: cfg, Unsandboxed: true, TempDir: tmp})
	require.NoError(t, err)
	_, ok := ex.Sandboxed()
	require.False(t, ok)
	code := filepath.Join(tmp, "code")
	writeFile(t, filepath.Join(code, "train.py"), "print('base')\n")
	o, err := ex.Execute(context.Background(), overlayJob(t, code, hostile("pass")))
	require.NoError(t, err, o.Log)
	require.Equal(t, 0.5, o.Loss)
}

// unprivilegedEnv marks the copy of the test binary runAsNobody starts.
const unprivilegedEnv = "LM2LM_OVERLAY_TEST_UNPRIVILEGED"

// runAsNobody runs the tests matching pattern in a copy of the test binary
// as user and group 65534 and fails t if they fail.
func runAsNobody(t *testing.T, pattern string) {
	t.Helper()
	if os.Getenv(unprivilegedEnv) != "" {
		t.Fatal("still root after dropping privileges")
	}
	dir, err := os.MkdirTemp("", "lm2lm-overlay-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	self, err := os.Open("/proc/self/exe")
	require.NoError(t, err)
	defer self.Close()
	bin := filepath.Join(dir, "overlay.test")
	f, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(f, self)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	cmd := exec.Command(bin, "-test.run="+pattern, "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=" + os.TempDir(), "HOME=" + dir, unprivilegedEnv + "=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	b, err := cmd.CombinedOutput()
	t.Logf("as nobody:\n%s", b)
	require.NoError(t, err)
	require.Contains(t, string(b), "--- PASS")
}

// Through the builder: the model's overlay of train.py connects to the
// host before it trains; its smoke test runs in the sandbox (the default
// executor), fails, and the proposal is infeasible with the reason in the
// log tail. PyTorch is not needed: the attack comes first.
func TestSandboxedSmokeRefusesHostile(t *testing.T) {
	requirePython(t)
	needSandbox(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	e := newPyEnv(t)
	scfg := overlay.DefaultSandboxConfig()
	scfg.Command = []string{python, "train.py"}
	scfg.ReadOnly = []string{e.base.corpus}
	ex, err := overlay.NewExecutor(overlay.ExecutorConfig{Sandbox: scfg, TempDir: filepath.Dir(e.code)})
	require.NoError(t, err)
	cfg := e.config()
	cfg.Executor = ex
	attack := fmt.Sprintf("import json\nimport socket\nsocket.create_connection((\"127.0.0.1\", %d), timeout=3).close()\n",
		ln.Addr().(*net.TCPAddr).Port)
	re, err := buildFails(t, e, cfg, answer(t, "train.py", e.edit(t, "import json\n", attack)))
	require.ErrorIs(t, err, overlay.ErrSmoke)
	require.Contains(t, re.Reason, "Network is unreachable")
	require.Zero(t, accepted.Load())
}
