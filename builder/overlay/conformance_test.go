package overlay_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/builder/overlay"
	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/records"
)

// The LLM builder passes the Builder conformance suite: jobs carry their
// task and proposal, rebuilds give the same job (from the overlay cache),
// concurrent builds agree, an unknown mechanism the model declines is
// infeasible, and proposal text with shell metacharacters stays data. The
// code is a stand-in shell script, so the suite needs no PyTorch.
func TestConformance(t *testing.T) {
	srv := oaitest.New(t, func(r oaitest.Request) oaitest.Reply {
		if strings.Contains(r.Text("user"), "buildertest-no-such-mechanism") {
			return oaitest.Text(`{"infeasible": "no such mechanism"}`)
		}
		return shAnswer()
	})
	dir := t.TempDir()
	code := dir + "/code"
	writeFile(t, code+"/run.sh", shScript)
	run := builder.DefaultSubprocessConfig()
	run.Command, run.TempDir, run.Timeout = []string{"/bin/sh", "run.sh"}, dir, 30*time.Second
	ex, err := overlay.NewExecutor(overlay.ExecutorConfig{Runner: overlay.SubprocessRunner(run), TempDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cfg := overlay.DefaultConfig()
	cfg.BaseURL, cfg.Model = srv.URL(), "builder-model"
	cfg.Getenv = func(string) string { return "" }
	cfg.Code, cfg.Allow = code, []string{"run.sh"}
	cfg.Base, cfg.Executor, cfg.Smoke = shBase{}, ex, shSmoke
	cfg.CacheDir = dir + "/cache"
	b, err := overlay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	buildertest.RunBuilder(t, b, buildertest.BuilderOptions{Task: shTask,
		Feasible: []records.Proposal{
			{Mechanism: records.FreeForm, Text: "Lower the loss."},
			{Mechanism: "loss-shift", Params: map[string]string{"delta": "-0.1"}},
		},
		Infeasible: []records.Proposal{{Mechanism: records.FreeForm}},
	})
}
