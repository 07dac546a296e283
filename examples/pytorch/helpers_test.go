package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lm2lm/lm2lm/internal/pytest"
	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/lab/corpus"
	"github.com/lm2lm/lm2lm/records"
)

// python is Debian's interpreter, which has python3-torch; another python3
// earlier on PATH may not.
const python = pytest.Python

// requireTorch skips the test without PyTorch, or fails it under CI
// (pytest.RequireTorch).
func requireTorch(t *testing.T) {
	t.Helper()
	pytest.RequireTorch(t, "the real runs")
}

func script(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(name)
	require.NoError(t, err)
	return p
}

// opticks is the path of the Opticks text in GOROOT.
func opticks(t *testing.T) string {
	t.Helper()
	p := filepath.Join(corpus.GOROOT(), filepath.FromSlash(corpus.OpticksPath))
	_, err := os.Stat(p)
	require.NoError(t, err, "the Opticks ships with every Go installation")
	return p
}

// testRecipe is a recipe of well under a CPU second.
func testRecipe() Recipe {
	r := BaseRecipe()
	r.Steps, r.Warmup, r.Batch = 30, 3, 8
	return r
}

// testTask is testRecipe's task; b_e and σ_e are near what its reference
// measures (executors refuse a gain far from b_e − ℓ as implausible).
var testTask = records.Task{ID: "test/opticks", Family: "gpt-prose", Split: records.Train, Metric: records.BitsPerByte,
	RefLoss: 4.55, SeedNoise: 0.05, Budget: 30, Description: "a test task"}

func newTestBuilder(t *testing.T, mod func(*Config)) *Builder {
	t.Helper()
	cfg := DefaultConfig([]TaskSpec{{Task: testTask, Corpus: opticks(t), Reference: testRecipe()}})
	cfg.EvalBytes = 2048
	if mod != nil {
		mod(&cfg)
	}
	b, err := NewBuilder(cfg)
	require.NoError(t, err)
	return b
}

// newSubprocess runs train.py with job directories under dir.
func newSubprocess(t *testing.T, dir string, timeout time.Duration) *builder.Subprocess {
	t.Helper()
	cfg := builder.DefaultSubprocessConfig()
	cfg.Command = []string{python, script(t, "train.py")}
	cfg.TempDir, cfg.Timeout, cfg.KillGrace = dir, timeout, time.Second
	s, err := builder.NewSubprocess(cfg)
	require.NoError(t, err)
	return s
}

// jobWith returns a job of the test task whose spec is edited by mod.
func jobWith(t *testing.T, b *Builder, p records.Proposal, mod func(*Spec)) builder.Job {
	t.Helper()
	j, err := b.Build(context.Background(), testTask, p)
	require.NoError(t, err)
	if mod != nil {
		var s Spec
		require.NoError(t, json.Unmarshal(j.Spec, &s))
		mod(&s)
		j.Spec, err = json.Marshal(s)
		require.NoError(t, err)
	}
	return j
}

// processesUnder lists the live processes whose command line mentions dir
// (the job files of a run are under it).
func processesUnder(dir string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(b), dir) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			s := string(st)
			if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && s[i+2] == 'Z' {
				continue // a zombie is already dead
			}
		}
		out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
	}
	return out
}

// requireNoProcesses waits up to 10 s for every process under dir to end.
func requireNoProcesses(t *testing.T, dir string) {
	t.Helper()
	require.Eventually(t, func() bool { return len(processesUnder(dir)) == 0 }, 10*time.Second, 50*time.Millisecond,
		"processes left behind: %v", processesUnder(dir))
}

// cancelWhenTraining calls cancel half a second after train.py runs under
// dir (or after a minute without it).
func cancelWhenTraining(dir string, cancel func()) {
	for i := 0; i < 3000; i++ {
		if strings.Contains(strings.Join(processesUnder(dir), "\n"), "train.py") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	cancel()
}
