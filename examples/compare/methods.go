package main

import (
	"context"
	"slices"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// method is one way to obtain a policy (METHOD.md §1 Data and evaluation:
// baselines and ablations; §2 WMRL).
type method struct {
	label string // for tables and charts
	order int    // row order
	// via is how the method obtains the proposer it evaluates: the
	// untrained policy, maximum likelihood on M_0 (sft, rft), package
	// baseline's proposers over M'_0 (bestknown, rerank), the trainer
	// (rl) or an outside run's policy (external). The fields below are
	// the parameters its obtainer reads.
	via obtainer
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
	rerank bool
	// choice: the rerank's candidates are every change of the catalogue
	// (baseline.Enumerate of lab/cards.All), not the policy's samples: the
	// world model's own choice over the whole action space, which no
	// policy limits.
	choice   bool
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
	// baseline): LM2LM with static training on the same world model (what
	// calibration adds), its rerank with LM2LM (what the rerank adds), the
	// transformer with its own warm-up (what RL added) and with LM2LM's
	// embedded policy (the same method, another policy).
	pairWith []string
}

// obtainer obtains the proposer a method evaluates for one job: the one
// behaviour in which methods differ. A new kind of method is a new
// obtainer; a new method of an existing kind is one entry of methods.
type obtainer interface {
	obtain(ctx context.Context, in *jobIn) (proposer.Proposer, error)
}

// jobIn is what a job hands its method's obtainer: the environment and
// options, the seed's untrained policy, M'_0 and what the method ranks or
// imitates (known), the run counter and the result to fill. An obtainer
// that trains a world model leaves it and its final evidence in world and
// final (the evaluation's predictions read them), and a proposer that
// holds a process leaves its stop in stop.
type jobIn struct {
	e         *env
	o         options
	m         method
	seed      uint64
	pol       *proposer.Policy
	m0, known records.Evidence
	cnt       *counter
	res       *Result
	world     rwm.WorldModel
	final     records.Evidence
	stop      func() error
}

// The obtainers (job.go, transformer.go).
type (
	untrained  struct{}              // the untrained policy itself
	supervised struct{ kind string } // "sft" or "rft" on known (supervise)
	bestKnown  struct{}              // baseline.BestKnown over known
	worldRank  struct{}              // baseline.Rerank of the untrained policy (or the catalogue) over M'_0
	rl         struct{}              // the trainer (train), its calibration and WMRL from the method
	external   struct{}              // an examples/llm-rl run's policy (transformerProposer)
)

// trains reports whether the method is the trainer's (LM2LM, its
// ablations, WMRL, the real-gains diagnostic).
func (m method) trains() bool { _, ok := m.via.(rl); return ok }

// external reports whether the method evaluates an outside run's policy.
func (m method) isExternal() bool { _, ok := m.via.(external); return ok }

// defaultRerankTemp is -rerank-temperature's default: lm2lm-rerank draws
// the 32 candidates its world model reranks at the validated setting's
// rollout temperature (2), not at the evaluation temperature (0.5).
// Chosen on v3-val (5 seeds, docs/results.md): candidates at 0.5, 1, 2
// and 4 gave Avg@4 +1.26, +1.38, +1.61 and +1.64 robust, and ranked each
// state's best mechanism at 15.8, 15.6, 15.1 and 15.0 of 30; 2 and 4 are
// level, and 2 is the temperature the policy was trained at.
const defaultRerankTemp = 2

var methods = map[string]method{
	"base":             {label: "Base (untrained)", order: 0, via: untrained{}, baseline: true},
	"sft":              {label: "SFT on M₀", order: 1, via: supervised{"sft"}, baseline: true},
	"rft":              {label: "RFT on M₀'s gains", order: 2, via: supervised{"rft"}, baseline: true},
	"rft-corpus":       {label: "RFT on M₀'s and the corpus's gains", order: 3, via: supervised{"rft"}, baseline: true, corpus: true},
	"bestknown":        {label: "best known changes (M'₀)", order: 4, via: bestKnown{}, extra: true, baseline: true},
	"bestknown-corpus": {label: "best known changes (M'₀ + corpus)", order: 5, via: bestKnown{}, extra: true, baseline: true, corpus: true},
	"rerank":           {label: "world-model rerank (M'₀)", order: 6, via: worldRank{}, extra: true, baseline: true},
	// rerank-prior is the rerank with the lab's pretrained prior in its
	// world model (lab/prior V2, its hyperparameters kept, the context's
	// gains clipped to ±setting.PriorClip σ_e): the strongest method
	// v3-val has measured (docs/results.md, 2026-12-06 prior entry).
	// Outside knowledge, as the corpus methods'; refused with
	// -hold-out-family, whose family the prior's corpus holds.
	"rerank-prior": {label: "world-model rerank (M'₀, pretrained prior)", order: 7, via: worldRank{}, extra: true, baseline: true, prior: true},
	// choice is the world model of the rerank (M'₀, the setting's world
	// model: with the prior under -setting prior-local) choosing over the
	// whole catalogue: what the world model itself judges best for a state,
	// paired with the rerank of the same world model over the policy's
	// samples.
	"choice": {label: "world-model choice over the catalogue (M'₀)", order: 8, via: worldRank{}, extra: true, baseline: true, choice: true, pairWith: []string{"rerank", "rerank-prior"}},
	"static": {label: "static world model", order: 9, via: rl{}, calibration: lm2lm.Static},
	// static-random is an ablation and a baseline (the static world model
	// given LM2LM's real-run budget as random records): the strongest
	// baseline is the one every calibrating method is paired with.
	"static-random": {label: "static + random records (M'₀)", order: 10, via: rl{}, calibration: lm2lm.Static, extra: true, baseline: true},
	"random":        {label: "random calibration", order: 11, via: rl{}, calibration: lm2lm.RandomCalibration},
	"lm2lm":         {label: "LM2LM", order: 12, via: rl{}, calibration: lm2lm.TopRated, pairWith: []string{"static"}},
	"lm2lm-wmrl":    {label: "LM2LM + WMRL", order: 13, via: rl{}, calibration: lm2lm.TopRated, wmrl: true},
	"static-wmrl":   {label: "WMRL (static + anchors)", order: 14, via: rl{}, calibration: lm2lm.Static, wmrl: true},
	"lm2lm-rerank":  {label: "LM2LM, world-model rerank", order: 15, via: rl{}, calibration: lm2lm.TopRated, rerank: true, pairWith: []string{"static", "lm2lm"}},
	// lm2lm-choice is LM2LM's trained world model and final evidence
	// choosing over the whole catalogue: what its calibrations taught the
	// world model, beside choice's random records at the same budget.
	"lm2lm-choice": {label: "LM2LM's world model, choice over the catalogue", order: 16, via: rl{}, calibration: lm2lm.TopRated, rerank: true, choice: true, pairWith: []string{"choice", "lm2lm"}},
	"real-gains":   {label: "trained on real gains (diagnostic)", order: 17, via: rl{}, calibration: lm2lm.Static, realGains: true},
	// The token-level transformer of examples/llm-rl, trained through the
	// environment service with LM2LM's rewards and calibrations, after
	// its warm-up and after RL (transformer.go).
	"transformer-warmup": {label: "transformer, warm-up only", order: 18, via: external{}, checkpoint: "warmup.pt"},
	"transformer": {label: "transformer, LM2LM through the service", order: 19, via: external{}, checkpoint: "final.pt",
		pairWith: []string{"transformer-warmup", "lm2lm"}},
}

// usesM0 reports whether the method draws on M_0's real records: every
// method but the untrained policy and the transformer's warm-up (which
// imitates catalogue-valid answers and reads no measured gain).
func (m method) usesM0() bool {
	_, none := m.via.(untrained)
	return !none && !(m.isExternal() && m.checkpoint == "warmup.pt")
}

// defaultMethods lists the methods -methods runs by default, in row
// order: every method but the real-gains diagnostic and the methods that
// draw on the pretraining corpus (they need -corpus) or evaluate a
// transformer run (they need -transformer).
func defaultMethods() []string {
	return slices.DeleteFunc(methodNames(), func(n string) bool {
		return methods[n].realGains || methods[n].corpus || methods[n].prior || methods[n].choice || methods[n].isExternal()
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
