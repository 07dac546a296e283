package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
)

// splitOpticks writes the Opticks split as train.py splits it (1 KiB
// blocks, every tenth validation) to a training file and a held-out file.
func splitOpticks(t *testing.T, dir string) (train, heldout string) {
	t.Helper()
	data, err := os.ReadFile(opticks(t))
	require.NoError(t, err)
	var tr, val []byte
	for i := 0; i < len(data); i += 1024 {
		blk := data[i:min(i+1024, len(data))]
		if (i/1024)%10 == 9 {
			val = append(val, blk...)
		} else {
			tr = append(tr, blk...)
		}
	}
	train, heldout = filepath.Join(dir, "train.txt"), filepath.Join(dir, "heldout.txt")
	require.NoError(t, os.WriteFile(train, tr, 0o644))
	require.NoError(t, os.WriteFile(heldout, val, 0o644))
	return train, heldout
}

// runScript runs train.py or evaluate.py on j with the checkpoint ckpt and
// returns its exit code and result file.
func runScript(t *testing.T, name, dir string, j builder.Job, ckpt string) (int, builder.Result) {
	t.Helper()
	job, result := filepath.Join(dir, name+".job.json"), filepath.Join(dir, name+".result.json")
	require.NoError(t, builder.WriteJobFile(job, j, result))
	_ = os.Remove(result)
	cmd := exec.Command(python, script(t, name), job, result)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "LM2LM_CHECKPOINT=" + ckpt}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err, "%s", out)
	}
	var r builder.Result
	if b, err := os.ReadFile(result); err == nil {
		require.NoError(t, json.Unmarshal(b, &r), "%s", b)
	}
	t.Logf("%s exit %d:\n%s", name, code, out)
	return code, r
}

// evaluate.py measures a checkpoint as train.py measures the model it
// trained, bit for bit, with the gain against the seed's reference loss;
// it refuses, as infeasible, a checkpoint of another architecture and one
// that carries pickled code.
func TestEvaluateCheckpoint(t *testing.T) {
	requireTorch(t)
	dir := t.TempDir()
	train, heldout := splitOpticks(t, dir)
	b := newTestBuilder(t, func(c *Config) { c.Tasks[0].Corpus, c.Tasks[0].Heldout = train, heldout })
	j := jobWith(t, b, records.Proposal{Mechanism: records.NoChange}, func(s *Spec) { s.ReferenceLosses = map[string]float64{"1": 4.6} })
	ckpt := filepath.Join(dir, "ckpt.pt")
	code, trained := runScript(t, "train.py", dir, j, ckpt)
	require.Zero(t, code)
	require.NotNil(t, trained.Loss)
	code, measured := runScript(t, "evaluate.py", dir, j, ckpt)
	require.Zero(t, code)
	require.NotNil(t, measured.Loss)
	require.Equal(t, *trained.Loss, *measured.Loss, "the evaluator's loss is the script's honest one, bit for bit")
	require.NotNil(t, measured.Gain)
	require.Equal(t, 4.6-*measured.Loss, *measured.Gain)

	// Another architecture: the checkpoint does not fit the recipe's model.
	wide := jobWith(t, b, records.Proposal{Mechanism: records.NoChange}, func(s *Spec) { s.Recipe.Width *= 2 })
	code, r := runScript(t, "evaluate.py", dir, wide, ckpt)
	require.Equal(t, builder.ExitInfeasible, code)
	require.Contains(t, r.Infeasible, "does not fit the recipe's model")

	// Pickled code in place of tensors: refused, never run.
	marker := filepath.Join(dir, "ran")
	evil := filepath.Join(dir, "evil.pt")
	mk := exec.Command(python, "-c", `import os, pickle, sys
class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + sys.argv[2],))
pickle.dump({"tok.weight": Evil()}, open(sys.argv[1], "wb"))
`, evil, marker)
	out, err := mk.CombinedOutput()
	require.NoError(t, err, "%s", out)
	code, r = runScript(t, "evaluate.py", dir, j, evil)
	require.Equal(t, builder.ExitInfeasible, code)
	require.Contains(t, r.Infeasible, "checkpoint unreadable")
	_, err = os.Stat(marker)
	require.ErrorIs(t, err, os.ErrNotExist, "the pickled code did not run")
}
