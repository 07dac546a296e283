package overlay_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/overlay"
	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/internal/pytest"
	"github.com/lm2lm/lm2lm/records"
)

// python is Debian's interpreter, which has python3-torch.
const python = pytest.Python

// trainPy is the example's training script, the code the overlays change.
const trainPy = "../../examples/pytorch/train.py"

var pyTask = records.Task{ID: "tiny-opticks", Family: "ar-tiny", Split: records.Train, Metric: records.BitsPerByte,
	RefLoss: 5, SeedNoise: 0.05, Budget: 4, Description: "a tiny character-level GPT"}

// recipe is a complete train.py recipe, tiny (seconds on one CPU thread).
func recipe(steps int) map[string]any {
	return map[string]any{"width": 16, "depth": 1, "heads": 2, "mlp_ratio": 2, "context": 16, "batch": 4,
		"steps": steps, "lr": 0.01, "min_lr_frac": 0.1, "warmup": 0, "schedule": "cosine", "optimizer": "adamw",
		"beta1": 0.9, "beta2": 0.95, "weight_decay": 0.0, "grad_clip": 1.0, "dropout": 0.0, "activation": "gelu",
		"tie_embeddings": false, "init_std": 0.02}
}

// pyBase is the base builder of train.py's tiny task: the reference
// recipe, with the reference losses set so far.
type pyBase struct {
	corpus  string
	heldout string // "": the corpus holds the validation blocks
	mu      sync.Mutex
	refs    map[string]float64
}

// splitHeldout writes b's corpus split as train.py splits it (blocks of
// 256 bytes, every fifth validation) to a training file and a held-out
// file beside it, and makes b's jobs name both.
func (b *pyBase) splitHeldout(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(b.corpus)
	if err != nil {
		t.Fatal(err)
	}
	var train, val []byte
	for i := 0; i < len(data); i += 256 {
		blk := data[i:min(i+256, len(data))]
		if (i/256)%5 == 4 {
			val = append(val, blk...)
		} else {
			train = append(train, blk...)
		}
	}
	dir := filepath.Dir(b.corpus)
	b.corpus, b.heldout = filepath.Join(dir, "train.txt"), filepath.Join(dir, "heldout.txt")
	for p, d := range map[string][]byte{b.corpus: train, b.heldout: val} {
		if err := os.WriteFile(p, d, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func (b *pyBase) Build(ctx context.Context, t records.Task, p records.Proposal) (builder.Job, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	spec := map[string]any{"corpus": b.corpus, "block": 256, "val_every": 5, "eval_bytes": 512,
		"recipe": recipe(6), "device": "cpu", "threads": 1}
	if len(b.refs) > 0 {
		spec["reference_losses"] = b.refs
	}
	if b.heldout != "" {
		spec["heldout"] = b.heldout
	}
	raw, err := json.Marshal(spec)
	return builder.Job{Task: t, Proposal: p, Seed: 1, Spec: raw}, err
}

// pySmoke shrinks a train.py job to two steps and 64 validation bytes,
// without the reference losses of the full budget.
func pySmoke(j builder.Job) (builder.Job, error) {
	var spec map[string]any
	if err := json.Unmarshal(j.Spec, &spec); err != nil {
		return j, err
	}
	spec["recipe"].(map[string]any)["steps"] = 2
	spec["eval_bytes"] = 64
	delete(spec, "reference_losses") // measured with the full budget
	raw, err := json.Marshal(spec)
	j.Spec = raw
	return j, err
}

// pyEnv is train.py in a code directory of its own, a corpus, the
// scripted model server and a builder over them.
type pyEnv struct {
	code, cache string
	src         string // train.py's text
	base        *pyBase
	server      *oaitest.Server
	exec        *overlay.Executor
	ledger      *builder.Ledger
}

func newPyEnv(t *testing.T) *pyEnv {
	t.Helper()
	src, err := os.ReadFile(trainPy)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	code := filepath.Join(dir, "code")
	if err := os.Mkdir(code, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(code, "train.py"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	corpus := filepath.Join(dir, "corpus.txt")
	text := strings.Repeat("It was the best of times, it was the worst of times, it was the age of wisdom. ", 80)
	if err := os.WriteFile(corpus, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	scfg := builder.DefaultSubprocessConfig()
	scfg.Command = []string{python, "train.py"}
	scfg.TempDir = dir
	plain := builder.DefaultSubprocessConfig()
	plain.Command = []string{python, filepath.Join(code, "train.py")}
	plainExec, err := builder.NewSubprocess(plain)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := overlay.NewExecutor(overlay.ExecutorConfig{Runner: overlay.SubprocessRunner(scfg), Plain: plainExec, TempDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return &pyEnv{code: code, cache: filepath.Join(dir, "cache"), src: string(src), base: &pyBase{corpus: corpus},
		server: oaitest.New(t, nil), exec: ex, ledger: &builder.Ledger{}}
}

// config returns the builder's configuration over e.
func (e *pyEnv) config() overlay.Config {
	cfg := overlay.DefaultConfig()
	cfg.BaseURL, cfg.Model = e.server.URL(), "builder-model"
	cfg.Getenv = func(string) string { return "" }
	cfg.Sleep = func(context.Context, time.Duration) error { return nil }
	cfg.Code, cfg.Allow = e.code, []string{"train.py"}
	cfg.Base, cfg.Executor, cfg.Smoke = e.base, e.exec, pySmoke
	cfg.SmokeTimeout = 20 * time.Second
	cfg.CheckBase = false
	cfg.CacheDir, cfg.Ledger = e.cache, e.ledger
	return cfg
}

func (e *pyEnv) builder(t *testing.T, cfg overlay.Config) *overlay.Builder {
	t.Helper()
	b, err := overlay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// edit returns train.py with old replaced by new once (the test fails if
// old is not there).
func (e *pyEnv) edit(t *testing.T, old, new string) string {
	t.Helper()
	if strings.Count(e.src, old) != 1 {
		t.Fatalf("train.py does not hold %q exactly once", old)
	}
	return strings.Replace(e.src, old, new, 1)
}

// answer is the model's answer of files (path, content pairs).
func answer(t *testing.T, files ...string) oaitest.Reply {
	t.Helper()
	var a overlay.Answer
	for i := 0; i+1 < len(files); i += 2 {
		a.Files = append(a.Files, overlay.File{Path: files[i], Content: files[i+1]})
	}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return oaitest.Text(string(b))
}

// requireTorch skips the test without PyTorch, or fails it under CI
// (pytest.RequireTorch).
func requireTorch(t *testing.T) {
	t.Helper()
	pytest.RequireTorch(t, "the overlaid training")
}

// requirePython skips when there is no python3 at all.
func requirePython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s is missing: %v", python, err)
	}
}

// writeFile writes content to path, making its directory.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
