package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"time"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/envconfig"
	"github.com/lm2lm/lm2lm/environment/yamlenv"
	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/progress"
	proposerpkg "github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/proposer/openai"
	"github.com/lm2lm/lm2lm/records"
)

// EvalSummary is the evaluate verb's report (<out>/evaluate.json): a
// trained proposer on the held-out tasks (METHOD.md §1 Data and
// evaluation), gains in σ_e units, intervals 95% bootstrap over states.
type EvalSummary struct {
	Model         string            `json:"model"`
	K             int               `json:"k"`
	StatesPerTask int               `json:"states_per_task"`
	Seed          uint64            `json:"seed"`
	Tasks         []string          `json:"tasks"`
	States        int               `json:"states"`
	AvgK          evalstat.Interval `json:"avg_k"`
	BestK         evalstat.Interval `json:"best_k"`
	NegativeRate  evalstat.Interval `json:"negative_rate"`
	Above2Sigma   evalstat.Interval `json:"above_2sigma"`
	Invalid       int               `json:"invalid"`
	Infeasible    float64           `json:"infeasible_rate"`
	Runs          int               `json:"runs_paid"`
	Reused        int               `json:"runs_reused"`
	Cost          records.Cost      `json:"cost"`
	Failures      []string          `json:"failures,omitempty"`
	Failed        int               `json:"failed"` // runs that gave no outcome (their proposals are not measured)
}

// proposer returns the trained proposer of evaluate.proposer.
func proposer(e *yamlenv.Env, getenv func(string) string) (*openai.Proposer, error) {
	pc := e.File().Evaluate.Proposer
	oc := openai.DefaultConfig()
	oc.BaseURL, oc.Model, oc.Temperature, oc.Catalogue = pc.BaseURL, pc.Model, *pc.Temperature, e.Catalogue()
	if pc.APIKeyEnv != "" {
		oc.APIKey = getenv(pc.APIKeyEnv)
		if oc.APIKey == "" {
			return nil, fmt.Errorf("lm2lm: evaluate.proposer.api_key_env names %s, which is not set", pc.APIKeyEnv)
		}
	}
	// Nothing else comes from the environment: the file names the server.
	oc.Getenv = func(string) string { return "" }
	return openai.New(oc)
}

// EmbeddedPolicy is the model name of the proposer evaluate uses when the
// file names no evaluate.proposer: the embedded policy, untrained (every
// catalogue change equally likely), which needs no server: the baseline
// any trained proposer must beat.
const EmbeddedPolicy = "embedded-policy"

// evalProposer returns the proposer evaluate asks: the server of
// evaluate.proposer, checked before anything is paid for, or the embedded
// policy.
func evalProposer(ctx context.Context, e *yamlenv.Env, getenv func(string) string, w io.Writer) (proposerpkg.Proposer, error) {
	pc := e.File().Evaluate.Proposer
	if pc == nil {
		fmt.Fprintf(w, "lm2lm: evaluate: no evaluate.proposer in the file: the embedded policy, untrained (catalogue changes at random), is evaluated\n")
		return embeddedPolicy(e.Catalogue())
	}
	if err := checkServer(ctx, "evaluate.proposer", pc.BaseURL, keyOf(pc.APIKeyEnv, getenv), pc.Model, w); err != nil {
		return nil, err
	}
	return proposer(e, getenv)
}

// embeddedPolicy is the proposer evaluate asks when the file names none:
// the embedded policy over cards, untrained, so its proposals depend on
// the states' random streams alone.
func embeddedPolicy(cards []records.Card) (*proposerpkg.Policy, error) {
	return proposerpkg.NewPolicy(cards, proposerpkg.DefaultPolicyConfig(), nil)
}

// evalConfig is the evaluation evaluate runs: evaluate.k proposals on
// evaluate.states_per_task states of each held-out task, seeded by
// evaluate.seed, executor.slots runs at once.
func evalConfig(cfg envconfig.Config) lm2lm.EvalConfig {
	ec := lm2lm.DefaultEvalConfig()
	ec.K, ec.StatesPerTask, ec.Seed, ec.Parallel = cfg.Evaluate.K, cfg.Evaluate.StatesPerTask, cfg.Evaluate.Seed, int(cfg.Executor.Slots)
	return ec
}

// evaluateVerb evaluates the trained proposer on the held-out tasks.
func evaluateVerb(ctx context.Context, cfg envconfig.Config, mode progress.Mode, getenv func(string) string, stdout, stderr io.Writer) error {
	e, p, err := open(cfg, mode, stderr)
	if err != nil {
		return err
	}
	defer e.Close()
	prop, err := evalProposer(ctx, e, getenv, stderr)
	if err != nil {
		return err
	}
	pr, err := prepare(ctx, e, p, false, stdout, stderr)
	if err != nil {
		return err
	}
	held := pr.HeldOut
	if len(held) == 0 {
		return fmt.Errorf("lm2lm: evaluate: no held-out task with a reference (give tasks split: held-out)")
	}
	start := time.Now()
	rep, err := lm2lm.Evaluate(ctx, evalConfig(cfg), prop, e.Builder(), e.Executor(), held, &records.Pool{})
	if err != nil {
		return err
	}
	failures := e.Failures()
	printFailures(stderr, failures)
	sum, err := summarize(cfg, rep)
	if err != nil {
		return errors.Join(err, short("evaluate", len(failures)))
	}
	sum.Failed = len(failures)
	for _, t := range held {
		sum.Tasks = append(sum.Tasks, t.ID)
	}
	path, err := e.WriteReport("evaluate.json", sum)
	if err != nil {
		return err
	}
	// Every evaluation is kept for the report verb, by model and seed.
	if _, err := e.WriteReport(filepath.Join("evaluations", builder.FileName(sum.Model)+"-seed"+strconv.FormatUint(sum.Seed, 10)+".json"), sum); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "evaluate %s: %d held-out tasks × %d states × %d proposals\n", sum.Model, len(held), sum.StatesPerTask, sum.K)
	fmt.Fprintf(stdout, "  Avg@%d %s σ_e   Best@%d %s σ_e   (95%% bootstrap over %d states)\n", sum.K, sum.AvgK, sum.K, sum.BestK, sum.States)
	fmt.Fprintf(stdout, "  gain ≤ 0: %s   gain > 2σ_e: %s   infeasible %.1f%%   invalid %d\n", rate(sum.NegativeRate), rate(sum.Above2Sigma), 100*sum.Infeasible, sum.Invalid)
	fmt.Fprintf(stdout, "evaluate: %d runs paid now, %d reused from %s, %d failed (%.1f s); report %s\n", sum.Runs, sum.Reused, cfg.Store,
		sum.Failed, time.Since(start).Seconds(), path)
	return short("evaluate", sum.Failed)
}

// summarize turns an evaluation into its report: Avg@K, Best@K and the
// rates with bootstrap intervals over the states that have a measured
// proposal.
func summarize(cfg envconfig.Config, rep lm2lm.EvalReport) (EvalSummary, error) {
	model := EmbeddedPolicy
	if cfg.Evaluate.Proposer != nil {
		model = cfg.Evaluate.Proposer.Model
	}
	s := EvalSummary{Model: model, K: cfg.Evaluate.K, StatesPerTask: cfg.Evaluate.StatesPerTask,
		Seed: cfg.Evaluate.Seed, Invalid: rep.Invalid, Infeasible: rep.InfeasibleRate, Runs: rep.Runs, Reused: rep.Reused,
		Cost: rep.Cost, Failures: rep.Failures}
	var cells []evalstat.Cell
	for i, st := range rep.States {
		c := evalstat.Cell{Seed: cfg.Evaluate.Seed, State: strconv.Itoa(i), Task: st.State.Task.ID}
		for _, x := range st.Samples {
			if x.Measured && !math.IsNaN(x.Gain) {
				c.Gains = append(c.Gains, x.Gain)
			}
		}
		if len(c.Gains) > 0 {
			cells = append(cells, c)
		}
	}
	s.States = len(cells)
	if len(cells) == 0 {
		return s, fmt.Errorf("lm2lm: evaluate: no proposal was measured (%d invalid, %d failures)", rep.Invalid, len(rep.Failures))
	}
	sm, err := evalstat.Summarize(evalstat.DefaultConfig(), s.Model, cells, rand.New(rand.NewPCG(cfg.Evaluate.Seed, 0x6576616c)))
	if err != nil {
		return s, err
	}
	s.AvgK, s.BestK, s.NegativeRate, s.Above2Sigma = sm.AvgK, sm.BestK, sm.NegativeRate, sm.Above
	return s, nil
}
