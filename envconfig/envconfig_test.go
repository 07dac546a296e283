package envconfig

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const valid = `# a small environment
version: 1
training:
  command: [python3, ./train.py]
  timeout: 2h
tasks:
  - id: prose-base
    family: ar-prose
    budget: 160
    recipe: {lr: 0.003, width: 32, schedule: cosine}
  - id: prose-held
    family: ar-prose
    split: held-out
catalogue:
  cards:
    - mechanism: lr-scale
      description: scale the learning rate
      params:
        - {name: factor, kind: float, choices: ["0.5", "2"], min: 0.1, max: 10}
`

func parse(t *testing.T, s string) (Config, error) {
	t.Helper()
	c, err := Parse([]byte(s), "/env")
	if err != nil {
		return c, err
	}
	c = c.Resolve()
	return c, c.Validate()
}

func TestValidConfigResolves(t *testing.T) {
	c, err := parse(t, valid)
	require.NoError(t, err)
	require.Equal(t, []string{"python3", "/env/train.py"}, c.Training.Command)
	require.Equal(t, 2*time.Hour, c.Training.Timeout)
	require.Equal(t, "/env/lm2lm-out/records.jsonl", c.Store)
	require.Equal(t, []uint64{1, 2, 3}, c.Tasks[0].Seeds)
	require.Equal(t, "train", c.Tasks[0].Split)
	require.Equal(t, "bits-per-byte", c.Tasks[1].Metric)
	require.Equal(t, Local, c.Executor.Kind)
	require.Equal(t, Embedded, c.WorldModel.Kind)
	require.Equal(t, []int{16, 40, 64}, c.Calibration.Steps)
	require.Equal(t, []int{31, 38, 31}, c.Calibration.Budgets)
	require.Equal(t, 100, c.M0.Size)
	require.Equal(t, "127.0.0.1:8080", c.Serve.Addr)
	require.Equal(t, 0.003, c.Tasks[0].Recipe["lr"])
	cards, err := c.Cards()
	require.NoError(t, err)
	require.Equal(t, "lr-scale", cards[0].Mechanism)
	require.Equal(t, []string{"0.5", "2"}, cards[0].Params[0].Choices)
}

// TestStrictErrorsNameTheirKey: every problem is an *Error wrapping
// ErrInvalid and its kind, naming the key path.
func TestStrictErrorsNameTheirKey(t *testing.T) {
	slurm := strings.Replace(valid, "tasks:", "executor:\n  kind: slurm\n  slurm:\n    gres: gpu:1\ntasks:", 1)
	openai := valid + "world_model:\n  kind: openai\n  openai:\n    base_url: http://localhost:8000/v1\n    model: m\n"
	for _, tc := range []struct {
		name, file, path string
		kind             error
	}{
		{"unknown top-level key", valid + "stor: x\n", "stor", ErrUnknownKey},
		{"evaluate k out of range", valid + "evaluate: {k: 100}\n", "evaluate.k", ErrRange},
		{"evaluate proposer without a model", valid + "evaluate:\n  proposer: {base_url: http://localhost:8001/v1}\n", "evaluate.proposer.model", ErrMissing},
		{"evaluate proposer url", valid + "evaluate:\n  proposer: {base_url: localhost:8001, model: m}\n", "evaluate.proposer.base_url", ErrRange},
		{"evaluate proposer temperature", valid + "evaluate:\n  proposer: {base_url: http://h/v1, model: m, temperature: 3}\n", "evaluate.proposer.temperature", ErrRange},
		{"evaluate proposer key in the file", valid + "evaluate:\n  proposer: {base_url: http://h/v1, model: m, api_key: sk-1}\n", "evaluate.proposer.api_key", ErrUnknownKey},
		{"unknown nested key", strings.Replace(slurm, "gres: gpu:1", "partion: gpu", 1), "executor.slurm.partion", ErrUnknownKey},
		{"unknown task key", strings.Replace(valid, "budget: 160", "budgets: 160", 1), "tasks[0].budgets", ErrUnknownKey},
		{"api key in the file", openai + "    api_key: sk-123\n", "world_model.openai.api_key", ErrUnknownKey},
		{"duplicate key", valid + "version: 1\n", "version", ErrDuplicateKey},
		{"duplicate recipe key", strings.Replace(valid, "width: 32", "lr: 32", 1), "tasks[0].recipe.lr", ErrDuplicateKey},
		{"string for an integer", strings.Replace(valid, "budget: 160", "budget: lots", 1), "tasks[0].budget", ErrType},
		{"quoted integer", strings.Replace(valid, "budget: 160", `budget: "160"`, 1), "tasks[0].budget", ErrType},
		{"bad duration", strings.Replace(valid, "timeout: 2h", "timeout: 2 hours", 1), "training.timeout", ErrType},
		{"list for a mapping", valid + "executor: [local]\n", "executor", ErrType},
		{"shell string for a list", strings.Replace(valid, "command: [python3, ./train.py]", "command: python3 train.py", 1), "training.command", ErrType},
		{"empty value", valid + "out:\n", "out", ErrType},
		{"alias", valid + "m0: &x {size: 3}\n", "m0", ErrSyntax},
		{"negative seed", valid + "m0: {seed: -1}\n", "m0.seed", ErrType},
		{"missing version", strings.Replace(valid, "version: 1\n", "", 1), "version", ErrMissing},
		{"wrong version", strings.Replace(valid, "version: 1", "version: 2", 1), "version", ErrRange},
		{"missing command", strings.Replace(valid, "  command: [python3, ./train.py]\n", "", 1), "training.command", ErrMissing},
		{"shell string in a one-element list", strings.Replace(valid, "[python3, ./train.py]", `["python3 train.py"]`, 1), "training.command", ErrRange},
		{"missing task id", strings.Replace(valid, "id: prose-held", "description: x", 1), "tasks[1].id", ErrMissing},
		{"missing family", strings.Replace(valid, "    family: ar-prose\n    split", "    split", 1), "tasks[1].family", ErrMissing},
		{"repeated task id", strings.Replace(valid, "prose-held", "prose-base", 1), "tasks[1].id", ErrRange},
		{"bad split", strings.Replace(valid, "held-out", "test", 1), "tasks[1].split", ErrRange},
		{"no training task", strings.Replace(valid, "family: ar-prose\n    budget", "family: ar-prose\n    split: held-out\n    budget", 1), "tasks", ErrMissing},
		{"negative budget", strings.Replace(valid, "budget: 160", "budget: -1", 1), "tasks[0].budget", ErrRange},
		{"repeated seed", valid + "reference: {seeds: [1, 1]}\n", "reference.seeds[1]", ErrRange},
		{"zero executor slots", valid + "executor: {slots: -2}\n", "executor.slots", ErrRange},
		{"too many attempts", valid + "executor: {max_attempts: 99}\n", "executor.max_attempts", ErrRange},
		{"unknown executor", valid + "executor: {kind: k8s}\n", "executor.kind", ErrRange},
		{"slurm without partition", slurm, "executor.slurm.partition", ErrMissing},
		{"slurm section with local", valid + "executor: {slurm: {partition: gpu}}\n", "executor.slurm", ErrRange},
		{"negative price", valid + "price_per_device_hour: -1\n", "price_per_device_hour", ErrRange},
		{"infinite price", valid + "price_per_device_hour: .inf\n", "price_per_device_hour", ErrRange},
		{"m0 too big", valid + "m0: {size: 1000000}\n", "m0.size", ErrRange},
		{"schedule lengths", valid + "calibration: {steps: [4, 8], budgets: [2]}\n", "calibration.budgets", ErrRange},
		{"schedule order", valid + "calibration: {steps: [8, 4], budgets: [2, 2]}\n", "calibration.steps[1]", ErrRange},
		{"openai without model", strings.Replace(openai, "    model: m\n", "", 1), "world_model.openai.model", ErrMissing},
		{"openai concurrency", openai + "    concurrency: 5000\n", "world_model.openai.concurrency", ErrRange},
		{"openai prompt version", openai + "    prompt_version: rwm-v9\n", "world_model.openai.prompt_version", ErrRange},
		{"key env not a name", openai + "    api_key_env: sk-123\n", "world_model.openai.api_key_env", ErrRange},
		{"no catalogue", strings.Split(valid, "catalogue:")[0], "catalogue", ErrMissing},
		{"card kind", strings.Replace(valid, "kind: float", "kind: real", 1), "catalogue.cards[0].params[0].kind", ErrRange},
		{"card choice out of range", strings.Replace(valid, `"0.5", "2"`, `"0.5", "20"`, 1), "catalogue.cards[0].params[0].choices[1]", ErrRange},
		{"card choice with trailing text", strings.Replace(valid, `"0.5", "2"`, `"0.5", "2 ; rm -rf /"`, 1), "catalogue.cards[0].params[0].choices[1]", ErrRange},
		{"card choice of two numbers", strings.Replace(valid, `"0.5", "2"`, `"0.5 2", "2"`, 1), "catalogue.cards[0].params[0].choices[0]", ErrRange},
		{"card choice padded", strings.Replace(valid, `"0.5", "2"`, `" 0.5 ", "2"`, 1), "", nil},
		{"group size", valid + "serve: {group_size: 0}\nm0: {size: 1}\n", "", nil},
		{"serve group size too big", valid + "serve: {group_size: 65}\n", "serve.group_size", ErrRange},
		{"descriptor name", strings.Replace(valid, "budget: 160", "budget: 160\n    descriptors: {Width: 1}", 1), "tasks[0].descriptors.Width", ErrRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, tc.file)
			if tc.kind == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorIs(t, err, tc.kind, "%v", err)
			var e *Error
			require.True(t, errors.As(err, &e))
			require.Equal(t, tc.path, e.Path, "%v", err)
			require.Contains(t, err.Error(), tc.path)
		})
	}
}

func TestSyntaxErrors(t *testing.T) {
	for _, s := range []string{"", "version: [1\n", "version: 1\n---\nversion: 1\n", "- 1\n- 2\n", "just a string\n"} {
		_, err := Parse([]byte(s), "")
		require.ErrorIs(t, err, ErrInvalid, "%q", s)
	}
}

// TestFormatRoundTrips: print-config's output parses strictly to the same
// config, with every default spelled out.
func TestFormatRoundTrips(t *testing.T) {
	for _, file := range []string{valid,
		strings.Replace(valid, "tasks:", "executor:\n  kind: slurm\n  slurm: {partition: gpu, slot_gres: gpu, time_limit: 90m}\ntasks:", 1) +
			"world_model:\n  kind: openai\n  openai: {base_url: 'http://h:1/v1', model: m, api_key_env: MY_KEY}\n"} {
		c, err := parse(t, file)
		require.NoError(t, err)
		out, err := Format(c)
		require.NoError(t, err)
		for _, key := range []string{"min_seed_noise:", "max_attempts:", "budgets:", "group_size:", "price_per_device_hour:"} {
			require.Contains(t, string(out), key)
		}
		back, err := parse(t, string(out))
		require.NoError(t, err, "%s", out)
		require.Equal(t, c, back)
	}
}

func TestDefaultsAreValidButForRequiredKeys(t *testing.T) {
	d := Defaults()
	require.Equal(t, 100, d.M0.Size)
	err := d.Validate()
	require.ErrorIs(t, err, ErrMissing)
	require.Contains(t, err.Error(), "training.command")
}

func TestCatalogueFile(t *testing.T) {
	dir := t.TempDir()
	cfg := strings.Split(valid, "catalogue:")[0] + "catalogue: {file: cards.json}\n"
	// JSON in records.Card's form, as a list.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cards.json"), []byte(`[
	  {"mechanism": "warmup", "description": "longer warm-up",
	   "params": [{"name": "steps", "kind": "int", "choices": ["10", "40"]}],
	   "prior": {"mean_sigmas": 0.5, "std_sigmas": 1}}]`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "env.yaml"), []byte(cfg), 0o600))
	c, err := Load(filepath.Join(dir, "env.yaml"))
	require.NoError(t, err)
	cards, err := c.Cards()
	require.NoError(t, err)
	require.Len(t, cards, 1)
	require.Equal(t, 0.5, cards[0].Prior.Mean)
	// A bad card in the file names its key.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cards.json"), []byte(`{"cards": [{"mechanism": "warmup", "extra": 1}]}`), 0o600))
	_, err = c.Cards()
	require.ErrorIs(t, err, ErrUnknownKey)
	require.Contains(t, err.Error(), "cards[0].extra")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cards.json"), []byte(`[{"mechanism": "warmup", "params": [{"name": "s", "kind": "int", "choices": ["1.5"]}]}]`), 0o600))
	_, err = c.Cards()
	require.ErrorIs(t, err, ErrRange)
	require.Contains(t, err.Error(), "params[0].choices[0]")
}

// FuzzParse: the parser never panics, and whatever it accepts and
// validates formats to a file that parses back to the same config.
func FuzzParse(f *testing.F) {
	f.Add(valid)
	f.Add(valid + "executor: {kind: slurm, slurm: {partition: p}}\n")
	f.Add("version: 1\ntasks: [{id: a, family: f, recipe: {x: [1, {y: z}]}}]\n")
	f.Add("a: &x 1\nb: *x\n")
	f.Add("version: 1\nversion: 1\n")
	f.Add("<<: {version: 1}\n")
	f.Add("tasks:\n  - ? [a]\n    : b\n")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse([]byte(s), "/env")
		if err != nil {
			require.ErrorIs(t, err, ErrInvalid)
			return
		}
		c = c.Resolve()
		if c.Validate() != nil {
			return
		}
		out, err := Format(c)
		require.NoError(t, err)
		back, err := Parse(out, "/env")
		require.NoError(t, err, "%s", out)
		back = back.Resolve()
		require.NoError(t, back.Validate())
	})
}

// FuzzCheckChoice: a numeric card choice is accepted only when its whole
// trimmed text is a finite number of its kind within the range.
func FuzzCheckChoice(f *testing.F) {
	for _, s := range []string{"2", " 0.5 ", "2 ; rm -rf /", "1e3", "0x1p3", "NaN", "2\n3", "1.5", ""} {
		f.Add(true, s)
		f.Add(false, s)
	}
	f.Fuzz(func(t *testing.T, integer bool, s string) {
		ps := Param{Name: "p", Kind: "float", Min: -1e6, Max: 1e6}
		if integer {
			ps.Kind = "int"
		}
		if checkChoice(ps, s) != nil {
			return
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) || x < ps.Min || x > ps.Max || (integer && x != math.Trunc(x)) {
			t.Fatalf("checkChoice(%s, %q) accepted a choice that is not one", ps.Kind, s)
		}
	})
}
