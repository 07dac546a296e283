package overlay_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/overlay"
)

// evalBase is a training script and its trusted evaluator, in plain
// Python: the script "trains" a weight w = 1.5 and saves it as its
// checkpoint; the evaluator reads w and the held-out target y = 1.5 and
// measures loss = 4 + (w − y)²/100.
const (
	evalTrain = `import json, os, sys
json.dump({"w": 1.5}, open(os.environ["LM2LM_CHECKPOINT"], "w"))
json.dump({"loss": 4.0}, open(sys.argv[2], "w"))
`
	evalScript = `import json, os, sys
job = json.load(open(sys.argv[1]))
w = json.load(open(os.environ["LM2LM_CHECKPOINT"]))["w"]
y = float(open(job["spec"]["heldout"]).read())
json.dump({"loss": 4 + (w - y) ** 2 / 100}, open(sys.argv[2], "w"))
`
	// forge reads the held-out file, rewrites the evaluator in its copy,
	// saves w = 9 and reports a loss of 0.5 and a gain of 4.5 (90 σ_e).
	forge = `import json, os, sys
job = json.load(open(sys.argv[1]))
try:
    seen = open(job["spec"]["heldout"]).read()
except OSError as e:
    seen = type(e).__name__
open("evaluate.py", "w").write("import json, sys\njson.dump({'loss': 0.25}, open(sys.argv[2], 'w'))\n")
json.dump({"w": 9.0}, open(os.environ.get("LM2LM_CHECKPOINT", "ckpt"), "w"))
json.dump({"loss": 0.5, "gain": 4.5}, open(sys.argv[2], "w"))
print("held-out read: %r" % seen)
`
)

// evalEnv lays out the code (train.py and evaluate.py) and the held-out
// file, and returns an overlay job maker over them.
func evalEnv(t *testing.T) (code, heldout string, job func(script string) builder.Job) {
	t.Helper()
	base := outsideTmp(t)
	code = filepath.Join(base, "code")
	writeFile(t, filepath.Join(code, "train.py"), evalTrain)
	writeFile(t, filepath.Join(code, "evaluate.py"), evalScript)
	heldout = filepath.Join(base, "heldout", "y.txt")
	writeFile(t, heldout, "1.5\n")
	require.NoError(t, os.Chmod(filepath.Dir(heldout), 0o755))
	inner, err := json.Marshal(map[string]string{"heldout": heldout})
	require.NoError(t, err)
	digest, err := overlay.Digest(code)
	require.NoError(t, err)
	job = func(script string) builder.Job {
		s := overlay.Spec{Overlay: overlay.SpecVersion, Code: code, Digest: digest, Inner: inner}
		if script != "" {
			s.Files = []overlay.File{{Path: "train.py", Content: script}}
			s.OvDigest = overlay.Overlay{Files: s.Files}.Digest()
		}
		raw, err := json.Marshal(s)
		require.NoError(t, err)
		return builder.Job{Task: pyTask, Proposal: freeForm, Seed: 1, Spec: raw}
	}
	return code, heldout, job
}

// A loss the overlay cannot forge: with the trusted evaluator the loss
// recorded is the evaluator's measurement of the checkpoint the run
// wrote, from held-out data the run never saw, with the evaluator's own
// code; the script's forged loss and gain are not. Without the evaluator
// the forged loss is what gets recorded.
func TestEvaluatorMeasuresForgedRun(t *testing.T) {
	requirePython(t)
	needSandbox(t)
	code, heldout, job := evalEnv(t)
	ev := &overlay.EvalConfig{Command: []string{python, "evaluate.py"}, Code: code, ReadOnly: []string{heldout}}
	trusted, _ := sandboxed(t, t.TempDir(), func(c *overlay.SandboxConfig) { c.Eval = ev })
	ctx := context.Background()

	// The unchanged code: w = y, loss 4, gain b_e − 4 = 1.
	out, err := trusted.Execute(ctx, job(""))
	require.NoError(t, err, out.Log)
	require.Equal(t, 4.0, out.Loss)
	require.InDelta(t, 1.0, out.Gain, 1e-12)

	// The forging overlay: the evaluator measures w = 9.
	out, err = trusted.Execute(ctx, job(forge))
	require.NoError(t, err, out.Log)
	require.InDelta(t, 4+7.5*7.5/100, out.Loss, 1e-12, out.Log)
	require.InDelta(t, pyTask.RefLoss-(4+7.5*7.5/100), out.Gain, 1e-12, "the gain is b_e − ℓ, not the script's 4.5")
	require.Contains(t, out.Log, "held-out read: ''", "the held-out file is hidden from the training run")
	require.Contains(t, out.Log, "the script reported loss 0.5")
	require.NotNil(t, out.Code)

	// Without the evaluator the forged numbers are recorded (and the
	// held-out file, not hidden, is read).
	forged, _ := sandboxed(t, t.TempDir(), func(c *overlay.SandboxConfig) { c.ReadOnly = []string{heldout} })
	out, err = forged.Execute(ctx, job(forge))
	require.NoError(t, err, out.Log)
	require.Equal(t, 0.5, out.Loss)
	require.Equal(t, 4.5, out.Gain)
}

// A run that leaves no usable checkpoint (none, a symbolic link, too
// large) is infeasible, and so is one the evaluator refuses.
func TestEvaluatorNeedsCheckpoint(t *testing.T) {
	requirePython(t)
	needSandbox(t)
	code, heldout, job := evalEnv(t)
	ev := &overlay.EvalConfig{Command: []string{python, "evaluate.py"}, Code: code, ReadOnly: []string{heldout}, CheckpointMax: 64}
	trusted, _ := sandboxed(t, t.TempDir(), func(c *overlay.SandboxConfig) { c.Eval = ev })
	for _, tc := range []struct {
		name, script string
		err          error
	}{
		{"none", `import json, sys
json.dump({"loss": 0.5}, open(sys.argv[2], "w"))`, overlay.ErrNoCheckpoint},
		{"symbolic link", `import json, os, sys
os.symlink("/etc/passwd", os.environ["LM2LM_CHECKPOINT"])
json.dump({"loss": 0.5}, open(sys.argv[2], "w"))`, overlay.ErrNoCheckpoint},
		{"too large", `import json, os, sys
open(os.environ["LM2LM_CHECKPOINT"], "w").write(" " * 65)
json.dump({"loss": 0.5}, open(sys.argv[2], "w"))`, overlay.ErrNoCheckpoint},
		{"refused by the evaluator", `import json, os, sys
open(os.environ["LM2LM_CHECKPOINT"], "w").write("not json")
json.dump({"loss": 0.5}, open(sys.argv[2], "w"))`, builder.ErrFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := trusted.Execute(context.Background(), job(tc.script))
			require.ErrorIs(t, err, tc.err, out.Log)
			require.Zero(t, out.Loss)
		})
	}
}
