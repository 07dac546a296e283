package main

import (
	"slices"

	"github.com/lm2lm/lm2lm"
)

// method is one way to obtain a policy (METHOD.md §1 Data and evaluation:
// baselines and ablations; §2 WMRL).
type method struct {
	label string // for tables and charts
	order int    // row order
	// kind: "none" (the untrained policy), "sft" or "rft" (maximum
	// likelihood on M_0), "bestknown" or "rerank" (package baseline's
	// proposers over M'_0), "rl" (the trainer).
	kind string
	// extra: the calibration budget is spent up front on random real
	// records (M'_0 = M_0 + as many random records, METHOD.md §1 Data and
	// evaluation: the static RWM with 100 random extra records), so the
	// method pays LM2LM's real-run budget.
	extra       bool
	calibration lm2lm.Calibration
	wmrl        bool
	// rerank: after training, the evaluation proposals are the best-rated
	// of the trained policy's samples under the trained world model and
	// the trainer's final evidence (baseline.Rerank over the trained
	// policy; not a method of METHOD.md, which evaluates the policy's own
	// samples: it uses the world model at test time too, for predictions
	// only, so it pays no real run beyond LM2LM's).
	rerank   bool
	baseline bool // a baseline the trained methods are compared against
	// realGains: the trainer's rewards are real gains (realGains, a world
	// model that trains every proposal it is asked about for real): a
	// diagnostic of the policy's ceiling, never a method or a result. It
	// runs only when -methods names it.
	realGains bool
	// corpus: the method also draws on the lab's pretraining corpus
	// (-corpus, the store of examples/priorcorpus): outside knowledge,
	// as the world-model methods get it through the pretrained prior
	// (lab/prior), which no real-run budget counts. BestKnown ranks M'_0 and the corpus's
	// records together; RFT imitates M_0's and the corpus's positive gains.
	// It runs only when -methods names it.
	corpus bool
	// prior: the method's world model carries the lab's pretrained prior
	// (rerank-prior). It runs only when -methods names it.
	prior bool
	// checkpoint, for the "external" kind, is the saved policy of an
	// examples/llm-rl run that the method evaluates (-transformer): the
	// policy after RL ("final.pt") or after its supervised warm-up
	// ("warmup.pt"). It runs only when -methods names it.
	checkpoint string
	// pairWith names the methods, when they are in the comparison, that
	// this method's cells are also paired with (beside Base and the best
	// baseline): the transformer with its own warm-up (what RL added) and
	// with LM2LM's embedded policy (the same method, another policy).
	pairWith []string
}

// defaultRerankTemp is -rerank-temperature's default: lm2lm-rerank draws
// the 32 candidates its world model reranks at the validated setting's
// rollout temperature (2), not at the evaluation temperature (0.5).
// Chosen on v3-val (5 seeds, docs/results.md): candidates at 0.5, 1, 2
// and 4 gave Avg@4 +1.26, +1.38, +1.61 and +1.64 robust, and ranked each
// state's best mechanism at 15.8, 15.6, 15.1 and 15.0 of 30; 2 and 4 are
// level, and 2 is the temperature the policy was trained at.
const defaultRerankTemp = 2

var methods = map[string]method{
	"base":             {label: "Base (untrained)", order: 0, kind: "none", baseline: true},
	"sft":              {label: "SFT on M₀", order: 1, kind: "sft", baseline: true},
	"rft":              {label: "RFT on M₀'s gains", order: 2, kind: "rft", baseline: true},
	"rft-corpus":       {label: "RFT on M₀'s and the corpus's gains", order: 3, kind: "rft", baseline: true, corpus: true},
	"bestknown":        {label: "best known changes (M'₀)", order: 4, kind: "bestknown", extra: true, baseline: true},
	"bestknown-corpus": {label: "best known changes (M'₀ + corpus)", order: 5, kind: "bestknown", extra: true, baseline: true, corpus: true},
	"rerank":           {label: "world-model rerank (M'₀)", order: 6, kind: "rerank", extra: true, baseline: true},
	// rerank-prior is the rerank with the lab's pretrained prior in its
	// world model (lab/prior V2, its hyperparameters kept, the context's
	// gains clipped to ±setting.PriorClip σ_e): the strongest method
	// v3-val has measured (docs/results.md, 2026-12-06 prior entry).
	// Outside knowledge, as the corpus methods'; refused with
	// -hold-out-family, whose family the prior's corpus holds.
	"rerank-prior": {label: "world-model rerank (M'₀, pretrained prior)", order: 7, kind: "rerank", extra: true, baseline: true, prior: true},
	"static":       {label: "static world model", order: 8, kind: "rl", calibration: lm2lm.Static},
	// static-random is an ablation and a baseline (the static world model
	// given LM2LM's real-run budget as random records): the strongest
	// baseline is the one every calibrating method is paired with.
	"static-random": {label: "static + random records (M'₀)", order: 9, kind: "rl", calibration: lm2lm.Static, extra: true, baseline: true},
	"random":        {label: "random calibration", order: 10, kind: "rl", calibration: lm2lm.RandomCalibration},
	"lm2lm":         {label: "LM2LM", order: 11, kind: "rl", calibration: lm2lm.TopRated},
	"lm2lm-wmrl":    {label: "LM2LM + WMRL", order: 12, kind: "rl", calibration: lm2lm.TopRated, wmrl: true},
	"static-wmrl":   {label: "WMRL (static + anchors)", order: 13, kind: "rl", calibration: lm2lm.Static, wmrl: true},
	"lm2lm-rerank":  {label: "LM2LM, world-model rerank", order: 14, kind: "rl", calibration: lm2lm.TopRated, rerank: true},
	"real-gains":    {label: "trained on real gains (diagnostic)", order: 15, kind: "rl", calibration: lm2lm.Static, realGains: true},
	// The token-level transformer of examples/llm-rl, trained through the
	// environment service with LM2LM's rewards and calibrations, after
	// its warm-up and after RL (transformer.go).
	"transformer-warmup": {label: "transformer, warm-up only", order: 16, kind: "external", checkpoint: "warmup.pt"},
	"transformer": {label: "transformer, LM2LM through the service", order: 17, kind: "external", checkpoint: "final.pt",
		pairWith: []string{"transformer-warmup", "lm2lm"}},
}

// usesM0 reports whether the method draws on M_0's real records: every
// method but the untrained policy and the transformer's warm-up (which
// imitates catalogue-valid answers and reads no measured gain).
func (m method) usesM0() bool {
	return m.kind != "none" && !(m.kind == "external" && m.checkpoint == "warmup.pt")
}

// defaultMethods lists the methods -methods runs by default, in row
// order: every method but the real-gains diagnostic and the methods that
// draw on the pretraining corpus (they need -corpus) or evaluate a
// transformer run (they need -transformer).
func defaultMethods() []string {
	return slices.DeleteFunc(methodNames(), func(n string) bool {
		return methods[n].realGains || methods[n].corpus || methods[n].prior || methods[n].kind == "external"
	})
}

// methodNames lists the methods in row order.
func methodNames() []string {
	var out []string
	for n := range methods {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b string) int { return methods[a].order - methods[b].order })
	return out
}
