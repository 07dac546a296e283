package overlay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/overlay"
	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/records"
)

// shScript is a stand-in training script for the example and the
// conformance run: it trains nothing and reports a loss, under the
// subprocess protocol (argv[2] is the result file).
const shScript = "loss=2.0\nprintf '{\"loss\": %s}\\n' \"$loss\" > \"$2\"\n"

// shTask is the stand-in's task: b_e = 2.
var shTask = records.Task{ID: "stand-in", Family: "sh", Split: records.Train, Metric: records.BitsPerByte,
	RefLoss: 2, SeedNoise: 0.05, Description: "a script that reports a loss"}

// shBase builds the stand-in's reference job.
type shBase struct{}

func (shBase) Build(_ context.Context, t records.Task, p records.Proposal) (builder.Job, error) {
	return builder.Job{Task: t, Proposal: p, Seed: 7, Spec: json.RawMessage(`{"budget":"full"}`)}, nil
}

// shSmoke gives the stand-in's job a smoke budget.
func shSmoke(j builder.Job) (builder.Job, error) {
	j.Spec = json.RawMessage(`{"budget":"smoke"}`)
	return j, nil
}

// shAnswer is the scripted model's overlay: a lower loss.
func shAnswer() oaitest.Reply {
	b, _ := json.Marshal(overlay.Answer{Files: []overlay.File{{Path: "run.sh", Content: "loss=1.9\nprintf '{\"loss\": %s}\\n' \"$loss\" > \"$2\"\n"}}})
	return oaitest.Text(string(b))
}

// A free-form proposal built by the LLM builder: the scripted server
// answers with an overlay of run.sh, which is validated, smoke-tested and
// then run for real on a private copy of the code; the outcome names the
// overlay as a unified diff.
func Example() {
	srv := oaitest.NewServer(func(oaitest.Request) oaitest.Reply { return shAnswer() })
	defer srv.Close()
	code, err := os.MkdirTemp("", "overlay-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(code)
	if err := os.WriteFile(filepath.Join(code, "run.sh"), []byte(shScript), 0o644); err != nil {
		panic(err)
	}

	run := builder.DefaultSubprocessConfig()
	run.Command = []string{"/bin/sh", "run.sh"} // run.sh of each run's private copy
	ex, err := overlay.NewExecutor(overlay.ExecutorConfig{Runner: overlay.SubprocessRunner(run)})
	if err != nil {
		panic(err)
	}
	cfg := overlay.DefaultConfig()
	cfg.BaseURL, cfg.Model = srv.URL(), "builder-model"
	cfg.Getenv = func(string) string { return "" } // no endpoint from the environment
	cfg.Code, cfg.Allow = code, []string{"run.sh"}
	cfg.Base, cfg.Executor, cfg.Smoke = shBase{}, ex, shSmoke
	b, err := overlay.New(cfg)
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	p := records.Proposal{Mechanism: records.FreeForm, Text: "Lower the loss."}
	j, err := b.Build(ctx, shTask, p)
	if err != nil {
		panic(err)
	}
	out, err := ex.Execute(ctx, j)
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Key())
	fmt.Printf("loss %.1f, gain %.1f\n", out.Loss, out.Gain)
	fmt.Print(out.Code.Diff)
	// Output:
	// free_form{text=sha256:cca06553cf2aabff}
	// loss 1.9, gain 0.1
	// --- a/run.sh
	// +++ b/run.sh
	// @@ -1,2 +1,2 @@
	// -loss=2.0
	// +loss=1.9
	//  printf '{"loss": %s}\n' "$loss" > "$2"
}
