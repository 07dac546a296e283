package rwm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/lm2lm/lm2lm/records"
)

// Sentinel errors of pretrained priors. Every error of FitPrior, ReadPrior
// and Prior.Config wraps ErrPrior; a file that is not a prior (truncated,
// changed, not JSON, a bad body) also wraps ErrPriorCorrupt, a file of
// another format version ErrPriorVersion, and a prior that does not fit a
// model's configuration (another catalogue or Effector) ErrPriorMismatch.
var (
	ErrPrior         = errors.New("rwm: prior")
	ErrPriorCorrupt  = fmt.Errorf("%w: corrupt file", ErrPrior)
	ErrPriorVersion  = fmt.Errorf("%w: unsupported format", ErrPrior)
	ErrPriorMismatch = fmt.Errorf("%w: does not fit the model", ErrPrior)
)

// Bounds of a prior's numbers. A prior's file carries a checksum against
// corruption, not against a file written with any coefficients at all: a
// file whose checksum was recomputed over absurd coefficients is still a
// well-formed file. So ReadPrior refuses (ErrPriorCorrupt, naming the
// feature) a coefficient that is not finite or whose magnitude exceeds
// MaxPriorCoefficient, FitPrior refuses (ErrPrior) to produce one, and
// Prior.Mean never returns a mean beyond ±MaxPriorMeanSigmas.
const (
	// MaxPriorCoefficient is the largest |coefficient| a prior may hold:
	// 1e6. The features are asinh-scaled descriptors (|x| ≤ 710 for any
	// float64), their differences and products, and the targets are gains
	// in σ_e units; the lab's prior (lab/prior/v2.prior) peaks at |997|, a
	// thousandth of the bound, and its other coefficients are below 230.
	MaxPriorCoefficient = 1e6
	// MaxPriorMeanSigmas bounds the prior mean gain Prior.Mean returns (and
	// the embedded model reads): a mean beyond ±1e4 σ_e is clamped to it.
	// Targets are clipped to a few σ_e (examples/priorcorpus fits with
	// Clip 6); the lab's prior predicts within ±101 σ_e over every
	// catalogue proposal on the V3 splits' tasks, a hundredth of the
	// bound, so the clamp leaves its predictions unchanged.
	MaxPriorMeanSigmas = 1e4
)

// checkCoef reports the first coefficient of p that is not finite or
// exceeds MaxPriorCoefficient, naming its feature (see Prior.Names).
func (p *Prior) checkCoef() error {
	for i, c := range p.body.Coef {
		if math.IsNaN(c) || math.IsInf(c, 0) || math.Abs(c) > MaxPriorCoefficient {
			return fmt.Errorf("coefficient %d (%q) is %g, want finite and |coefficient| ≤ %g",
				i, records.Excerpt(p.Names()[i]), c, float64(MaxPriorCoefficient))
		}
	}
	return nil
}

// PriorTerms selects the groups of features of a prior's mean function.
// With x_n = asinh(d_n) the task's descriptors (a name the task lacks
// counting 0) and δ_n = asinh(after_n) − asinh(before_n) what the proposal
// does to them (EmbeddedConfig.Effects), the prior mean gain in σ_e units
// is the sum of the groups that are on:
//
//	Proposal:  w_k + Σ_n w_kn·x_n       for the proposal's key k (Proposal.Key)
//	Mechanism: v_m + Σ_n v_mn·x_n       for its canonical mechanism m
//	Effects:   Σ_n (u_n·δ_n + s_n·δ_n·x_n + c_n·δ_n²)
//
// The Proposal group is a ridge regression per proposal on the task's
// descriptors; the Mechanism group carries that to proposals of a known
// mechanism with other parameters; the Effects group is a first-order
// model of the loss around each task's reference whose gradient varies
// linearly with the descriptor it moves, with a curvature term. A
// proposal whose key and mechanism the prior has no coefficients for
// takes, in place of both groups, the configuration's own prior mean
// (EmbeddedConfig.Priors or MeanSigmas).
type PriorTerms struct {
	Proposal  bool `json:"proposal"`
	Mechanism bool `json:"mechanism"`
	Effects   bool `json:"effects"`
}

// PriorFitConfig parameterises FitPrior.
type PriorFitConfig struct {
	// Base is the embedded configuration the prior is fitted for: its
	// Cards (the catalogue), Effects (the Effector, whose ID the file
	// records) and InfeasibleSigmas are those of the models that load it,
	// and the grid's configurations start from it.
	Base EmbeddedConfig
	// Terms are the mean function's groups; DefaultPriorFitConfig turns
	// on Proposal and Mechanism, and Effects when Base.Effects is set.
	Terms PriorTerms
	// MinProposalRecords is the number of corpus records a proposal key
	// needs for its own Proposal coefficients; default 2.
	MinProposalRecords int
	// Ridge is λ of the mean's ridge regression: the coefficients w
	// minimise Σ_i (y_i − w·f_i)² + λ·Σ_j (w_j·rms_j)², with y_i the
	// records' gains in σ_e units (infeasible ones at InfeasibleSigmas) and
	// rms_j feature j's root mean square over the corpus, so that λ acts
	// on every feature in its own units. Default 1 (library choice: the
	// offline ridge probe of docs/results.md used λ 1; with thousands of
	// records a negligible shrinkage, with a feature few records have it
	// keeps its coefficient near 0). On the lab's pretraining corpus λ 1
	// leaves the system singular (features that move together), and
	// examples/priorcorpus fits with λ 100 and Clip 6, chosen on lab v2's
	// validation landscape (docs/results.md). Must be > 0.
	Ridge float64
	// Clip, when > 0, clips each record's target to ±Clip σ_e before the
	// mean's ridge regression (the marginal-likelihood blocks read the
	// records unclipped): a few heavy-tailed gains then do not decide the
	// coefficients, as the reward's clip c keeps them from deciding a
	// reward (METHOD.md §1 Reward 1). Default 0, no clip (library choice:
	// the corpus's gains are kept as measured); examples/priorcorpus clips
	// at 6, the range its ranking is scored in, which on lab v2's
	// validation landscape lifted the prior's ranking with a corpus of 95
	// tasks (docs/results.md). Must be finite and ≥ 0.
	Clip float64
	// Grid is the kernel hyperparameters' search space; nil is
	// TuneGrid(Base). Each configuration must carry Base's Cards and
	// Effects.
	Grid []EmbeddedConfig
	// Blocks and BlockRecords choose the grid's configuration by the sum
	// of the log marginal likelihoods (LogMarginal, with the fitted mean
	// as prior mean) of Blocks contexts of at most BlockRecords records
	// each, made of whole tasks drawn without replacement with Seed (a
	// task with more records gives its first BlockRecords in canonical
	// order): type-II maximum likelihood in the regime the model is used
	// in, at a cost that does not grow with the corpus. Defaults 16 and
	// 200 (library choice: the budget's 200 records per context). With
	// fewer than 10 records in all, the grid is not searched and Base's
	// hyperparameters are kept.
	Blocks, BlockRecords int
	// Seed draws the blocks' tasks.
	Seed uint64
}

// DefaultPriorFitConfig returns the documented defaults around base.
func DefaultPriorFitConfig(base EmbeddedConfig) PriorFitConfig {
	return PriorFitConfig{
		Base: base, Terms: PriorTerms{Proposal: true, Mechanism: true, Effects: base.Effects != nil},
		MinProposalRecords: 2, Ridge: 1, Blocks: 16, BlockRecords: 200,
	}
}

// Validate reports the first problem with c, wrapping ErrPrior.
func (c PriorFitConfig) Validate() error {
	base := c.Base
	base.Prior = nil
	if err := base.Validate(); err != nil {
		return fmt.Errorf("%w: base: %w", ErrPrior, err)
	}
	switch {
	case !c.Terms.Proposal && !c.Terms.Mechanism && !c.Terms.Effects:
		return fmt.Errorf("%w: no terms", ErrPrior)
	case c.Terms.Effects && c.Base.Effects == nil:
		return fmt.Errorf("%w: effect terms without an Effector", ErrPrior)
	case c.MinProposalRecords < 1:
		return fmt.Errorf("%w: MinProposalRecords %d, want ≥ 1", ErrPrior, c.MinProposalRecords)
	case math.IsNaN(c.Ridge) || math.IsInf(c.Ridge, 0) || c.Ridge <= 0:
		return fmt.Errorf("%w: Ridge %g, want finite and > 0", ErrPrior, c.Ridge)
	case math.IsNaN(c.Clip) || math.IsInf(c.Clip, 0) || c.Clip < 0:
		return fmt.Errorf("%w: Clip %g, want finite and ≥ 0", ErrPrior, c.Clip)
	case c.Blocks < 1 || c.BlockRecords < 1:
		return fmt.Errorf("%w: Blocks %d, BlockRecords %d, want ≥ 1", ErrPrior, c.Blocks, c.BlockRecords)
	case c.Grid != nil && len(c.Grid) == 0:
		return fmt.Errorf("%w: empty grid", ErrPrior)
	}
	return nil
}

// PriorHyper is the kernel hyperparameters a prior carries
// (EmbeddedConfig's fields of the same names).
type PriorHyper struct {
	SignalSigmas          float64 `json:"signal_sigmas"`
	NoiseSigmas           float64 `json:"noise_sigmas"`
	OffsetSigmas          float64 `json:"offset_sigmas"`
	CorrFamily            float64 `json:"corr_family"`
	CorrMetric            float64 `json:"corr_metric"`
	CorrAny               float64 `json:"corr_any"`
	CorrMech              float64 `json:"corr_mech"`
	CorrOtherMech         float64 `json:"corr_other_mech"`
	Lengthscale           float64 `json:"lengthscale"`
	Mismatch              float64 `json:"mismatch"`
	DescriptorWeight      float64 `json:"descriptor_weight"`
	DescriptorLengthscale float64 `json:"descriptor_lengthscale"`
	EffectSigmas          float64 `json:"effect_sigmas"`
	LossSigmas            float64 `json:"loss_sigmas"`
	LossLengthscale       float64 `json:"loss_lengthscale"`
}

// hyperOf returns c's hyperparameters.
func hyperOf(c EmbeddedConfig) PriorHyper {
	return PriorHyper{c.SignalSigmas, c.NoiseSigmas, c.OffsetSigmas, c.CorrFamily, c.CorrMetric, c.CorrAny,
		c.CorrMech, c.CorrOtherMech, c.Lengthscale, c.Mismatch, c.DescriptorWeight, c.DescriptorLengthscale,
		c.EffectSigmas, c.LossSigmas, c.LossLengthscale}
}

// apply returns base with h's hyperparameters.
func (h PriorHyper) apply(base EmbeddedConfig) EmbeddedConfig {
	c := base
	c.SignalSigmas, c.NoiseSigmas, c.OffsetSigmas = h.SignalSigmas, h.NoiseSigmas, h.OffsetSigmas
	c.CorrFamily, c.CorrMetric, c.CorrAny = h.CorrFamily, h.CorrMetric, h.CorrAny
	c.CorrMech, c.CorrOtherMech, c.Lengthscale, c.Mismatch = h.CorrMech, h.CorrOtherMech, h.Lengthscale, h.Mismatch
	c.DescriptorWeight, c.DescriptorLengthscale = h.DescriptorWeight, h.DescriptorLengthscale
	c.EffectSigmas, c.LossSigmas, c.LossLengthscale = h.EffectSigmas, h.LossSigmas, h.LossLengthscale
	return c
}

// PriorCorpus describes the corpus a prior was fitted on and how.
type PriorCorpus struct {
	Records          int     `json:"records"`           // real records read
	Tasks            int     `json:"tasks"`             // distinct task IDs
	InfeasibleSigmas float64 `json:"infeasible_sigmas"` // the target of infeasible records
	Ridge            float64 `json:"ridge"`
	Clip             float64 `json:"clip,omitempty"` // PriorFitConfig.Clip; 0 = none
	// LogMarginal is the chosen configuration's summed log marginal
	// likelihood over the blocks (0 when the grid was not searched).
	LogMarginal float64 `json:"log_marginal"`
	Blocks      int     `json:"blocks"` // blocks actually used
	Seed        uint64  `json:"seed"`
}

// Prior is a prior pretrained on a corpus of records (FitPrior) or read
// from its file (ReadPrior): a mean function of (task descriptors,
// proposal, what the proposal does to the descriptors) and kernel
// hyperparameters, for EmbeddedConfig.Prior. It is immutable and safe for
// concurrent use.
type Prior struct {
	body   priorBody
	digest string         // SHA-256 of the body's encoding, hex
	desc   map[string]int // interning key of a descriptor ("d", NUL, name) → n
	props  map[string]int // proposal key → start of its block
	mechs  map[string]int // canonical mechanism → start of its block
	eff    int            // start of the effect block; −1 without
}

// priorBody is the content of a prior's file.
type priorBody struct {
	Catalogue   string      `json:"catalogue"`          // catalogueDigest of the cards
	Effector    string      `json:"effector,omitempty"` // Effector ID (with Terms.Effects)
	Terms       PriorTerms  `json:"terms"`
	Descriptors []string    `json:"descriptors"` // sorted names
	Proposals   []string    `json:"proposals"`   // sorted keys
	Mechanisms  []string    `json:"mechanisms"`  // sorted canonical names
	Coef        []float64   `json:"coef"`        // layout of Prior.Names
	Hyper       PriorHyper  `json:"hyper"`
	Corpus      PriorCorpus `json:"corpus"`
}

// newPrior builds a Prior's indices over body (whose layout must be
// consistent, see checkBody) and its digest.
func newPrior(body priorBody) (*Prior, error) {
	p := &Prior{body: body, desc: map[string]int{}, props: map[string]int{}, mechs: map[string]int{}, eff: -1}
	d := len(body.Descriptors)
	for n, name := range body.Descriptors {
		p.desc["d\x00"+name] = n
	}
	at := 0
	if body.Terms.Proposal {
		for _, k := range body.Proposals {
			p.props[k] = at
			at += 1 + d
		}
	}
	if body.Terms.Mechanism {
		for _, m := range body.Mechanisms {
			p.mechs[m] = at
			at += 1 + d
		}
	}
	if body.Terms.Effects {
		p.eff = at
		at += 3 * d
	}
	if at != len(body.Coef) {
		return nil, fmt.Errorf("%w: %d coefficients, the layout has %d", ErrPriorCorrupt, len(body.Coef), at)
	}
	if err := p.checkCoef(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPriorCorrupt, err)
	}
	b, err := encodeBody(body)
	if err != nil {
		return nil, err
	}
	p.digest = checksum(b)
	return p, nil
}

// Digest names the prior: the SHA-256 (hex) of its file's body.
func (p *Prior) Digest() string { return p.digest }

// Terms returns the prior's feature groups.
func (p *Prior) Terms() PriorTerms { return p.body.Terms }

// Hyper returns the kernel hyperparameters fitted with the prior.
func (p *Prior) Hyper() PriorHyper { return p.body.Hyper }

// Corpus returns what the prior was fitted on.
func (p *Prior) Corpus() PriorCorpus { return p.body.Corpus }

// Names returns the names of the mean's features in the order of
// Coefficients: "proposal|<key>|1" and "proposal|<key>|<descriptor>",
// "mechanism|<m>|1" and "mechanism|<m>|<descriptor>", "effect|<d>",
// "effect|<d>|x" and "effect|<d>|sq" (PriorTerms' w, v, u, s and c).
func (p *Prior) Names() []string {
	var out []string
	block := func(kind, id string) {
		out = append(out, kind+"|"+id+"|1")
		for _, d := range p.body.Descriptors {
			out = append(out, kind+"|"+id+"|"+d)
		}
	}
	if p.body.Terms.Proposal {
		for _, k := range p.body.Proposals {
			block("proposal", k)
		}
	}
	if p.body.Terms.Mechanism {
		for _, m := range p.body.Mechanisms {
			block("mechanism", m)
		}
	}
	if p.body.Terms.Effects {
		for _, d := range p.body.Descriptors {
			out = append(out, "effect|"+d, "effect|"+d+"|x", "effect|"+d+"|sq")
		}
	}
	return out
}

// Coefficients returns a copy of the mean's coefficients (see Names).
func (p *Prior) Coefficients() []float64 { return slices.Clone(p.body.Coef) }

// Config returns base with the prior's hyperparameters and Prior set: the
// configuration of an embedded model that starts from the corpus and
// conditions on its context's records. Base's other fields (Cards,
// Effects, Priors' amplitudes, FitScale, …) are kept; an error wrapping
// ErrPriorMismatch says base's catalogue or Effector is not the prior's.
func (p *Prior) Config(base EmbeddedConfig) (EmbeddedConfig, error) {
	c := p.body.Hyper.apply(base)
	c.Prior = p
	if err := c.Validate(); err != nil {
		if errors.Is(err, ErrPrior) {
			return base, err
		}
		return base, fmt.Errorf("%w: %w", ErrPriorMismatch, err)
	}
	return c, nil
}

// fits reports why a configuration c holding p cannot use it (nil: it
// can; a nil p always fits).
func (p *Prior) fits(c EmbeddedConfig) error {
	if p == nil {
		return nil
	}
	if got := catalogueDigest(c.Cards); got != p.body.Catalogue {
		return fmt.Errorf("%w: catalogue %.12s, the prior's is %.12s", ErrPriorMismatch, got, p.body.Catalogue)
	}
	if p.body.Terms.Effects && (c.Effects == nil || c.Effects.ID() != p.body.Effector) {
		got := "none"
		if c.Effects != nil {
			got = fmt.Sprintf("%q", records.Excerpt(c.Effects.ID()))
		}
		return fmt.Errorf("%w: Effector %s, the prior's is %q", ErrPriorMismatch, got, records.Excerpt(p.body.Effector))
	}
	return nil
}

// Mean returns the prior mean gain of prop on t in σ_e units, calling eff
// (the prior's Effector when its effect terms are on; nil otherwise) and
// taking fallback for the groups a proposal has no coefficients for (see
// PriorTerms). The mean is clamped to ±MaxPriorMeanSigmas; a mean that is
// not a number (a descriptor that is not finite) is the fallback, clamped.
func (p *Prior) Mean(t records.Task, prop records.Proposal, eff Effector, fallback float64) float64 {
	c := EmbeddedConfig{Effects: eff}
	return p.mean(t, prop, &effect{}, &c, fallback)
}

// mean is the prior mean of (t, prop) whose kernel effect is fx (computed
// with c's Effector when the kernel reads it; see featuresOf).
func (p *Prior) mean(t records.Task, prop records.Proposal, fx *effect, c *EmbeddedConfig, fallback float64) float64 {
	desc := fx.desc
	if desc == nil {
		desc = asinhNamed(t.Descriptors)
	}
	var delta []named
	if p.eff >= 0 {
		switch {
		case c.effector() != nil:
			delta = fx.delta // what the kernel computed: nil when the Effector failed
		case c.Effects != nil:
			delta = newEffect(t, prop, c.Effects, false).delta
		}
	}
	s, known := p.dot(desc, delta, prop)
	if !known {
		s += fallback
	}
	if math.IsNaN(s) {
		s = fallback
	}
	return max(-MaxPriorMeanSigmas, min(MaxPriorMeanSigmas, s))
}

// dot is Σ coef·feature over features(desc, delta, prop) and its known,
// without building the row (x stays on the stack for up to 64
// descriptors).
func (p *Prior) dot(desc, delta []named, prop records.Proposal) (float64, bool) {
	var buf [64]float64
	var x []float64
	if d := len(p.body.Descriptors); d <= len(buf) {
		x = buf[:d]
	} else {
		x = make([]float64, d)
	}
	for _, d := range desc {
		if n, ok := p.desc[d.key]; ok {
			x[n] = d.x
		}
	}
	w := p.body.Coef
	var s float64
	known := false
	block := func(at int) {
		known = true
		s += w[at]
		for n, v := range x {
			if v != 0 {
				s += w[at+1+n] * v
			}
		}
	}
	if at, ok := p.props[prop.Key()]; ok {
		block(at)
	}
	if at, ok := p.mechs[records.CanonicalName(prop.Mechanism)]; ok {
		block(at)
	}
	if p.eff >= 0 {
		for _, d := range delta {
			if n, ok := p.desc[d.key]; ok {
				at := p.eff + 3*n
				s += w[at]*d.x + w[at+1]*(d.x*x[n]) + w[at+2]*(d.x*d.x)
			}
		}
	}
	return s, known
}

// sparse is one nonzero feature: its index and value.
type sparse struct {
	i int
	v float64
}

// features appends the nonzero features of a gain on a task with
// descriptors desc (asinh, sorted) of a proposal that changes them by
// delta to row, and reports whether the proposal's key or mechanism has a
// block (else its mean takes the fallback).
func (p *Prior) features(desc, delta []named, prop records.Proposal, row []sparse) ([]sparse, bool) {
	x := make([]float64, len(p.body.Descriptors))
	for _, d := range desc {
		if n, ok := p.desc[d.key]; ok {
			x[n] = d.x
		}
	}
	known := false
	block := func(at int) {
		known = true
		row = append(row, sparse{at, 1})
		for n, v := range x {
			if v != 0 {
				row = append(row, sparse{at + 1 + n, v})
			}
		}
	}
	if at, ok := p.props[prop.Key()]; ok {
		block(at)
	}
	if at, ok := p.mechs[records.CanonicalName(prop.Mechanism)]; ok {
		block(at)
	}
	if p.eff >= 0 {
		for _, d := range delta {
			if n, ok := p.desc[d.key]; ok {
				at := p.eff + 3*n
				row = append(row, sparse{at, d.x}, sparse{at + 1, d.x * x[n]}, sparse{at + 2, d.x * d.x})
			}
		}
	}
	return row, known
}

// fallbackMean is c's own prior mean of prop (a catalogue prior's mean or
// MeanSigmas), in σ_e units.
func fallbackMean(c EmbeddedConfig, prop records.Proposal) float64 {
	mech := records.CanonicalName(prop.Mechanism)
	for m, pr := range c.Priors {
		if records.CanonicalName(m) == mech {
			return pr.Mean
		}
	}
	return c.MeanSigmas
}

// FitPriorStore is FitPrior on the real records of store.
func FitPriorStore(ctx context.Context, cfg PriorFitConfig, store records.Store) (*Prior, error) {
	rs, err := store.Scan(ctx, records.Filter{Source: records.Real})
	if err != nil {
		return nil, fmt.Errorf("%w: corpus: %w", ErrPrior, err)
	}
	return FitPrior(ctx, cfg, rs)
}

// FitPrior fits a prior on a corpus of real records of other tasks: the
// mean function by ridge regression (PriorFitConfig.Ridge) over the
// features of cfg.Terms, then the kernel hyperparameters by the summed
// log marginal likelihood of blocks of the corpus with that mean
// (PriorFitConfig.Blocks). Records that are not Real are skipped; an
// invalid or implausible real record is an error (records.NewEvidence).
// The result depends only on the corpus (in any order) and cfg; the
// corpus is absorbed into the prior, so a model that loads it predicts at
// the cost of its context's records. It costs O(N·r² + P³) for the mean (N records, r
// nonzero features per record, P features) and Blocks × len(Grid)
// factorisations of BlockRecords records for the hyperparameters.
func FitPrior(ctx context.Context, cfg PriorFitConfig, corpus []records.Record) (*Prior, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base := cfg.Base
	base.Prior = nil
	ev, err := records.RealOnly(corpus)
	if err != nil {
		return nil, fmt.Errorf("%w: corpus: %w", ErrPrior, err)
	}
	if ev.Len() == 0 {
		return nil, fmt.Errorf("%w: no real records in the corpus", ErrPrior)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPrior, err)
	}
	var eff Effector
	if cfg.Terms.Effects {
		eff = base.Effects
	}
	p, err := prepare(ctx, ev, eff, true)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPrior, err)
	}
	body := layout(cfg, p)
	mp, err := fitMean(ctx, cfg, body, p)
	if err != nil {
		return nil, err
	}
	best, lm, blocks, err := fitHyper(ctx, cfg, mp, p.rs)
	if err != nil {
		return nil, err
	}
	body = mp.body
	body.Hyper = hyperOf(best)
	body.Corpus.LogMarginal, body.Corpus.Blocks = lm, blocks
	return newPrior(body)
}

// mustRecords is the evidence of records already accepted as evidence.
func mustRecords(rs []records.Record) records.Evidence {
	ev, err := records.NewEvidence(rs...)
	if err != nil {
		panic(fmt.Sprintf("rwm: prior: validated records: %v", err)) // unreachable: every record is valid and real
	}
	return ev
}

// layout returns the body of a prior over p's records without
// coefficients: the descriptors their tasks have or their effects
// change, the proposals with at least MinProposalRecords records, and
// their mechanisms.
func layout(cfg PriorFitConfig, p *prepared) priorBody {
	descs, keys, mechs := map[string]bool{}, map[string]int{}, map[string]bool{}
	tasks := map[string]bool{}
	for i, r := range p.rs {
		tasks[r.Task.ID] = true
		for _, d := range slices.Concat(p.fx[i].desc, p.fx[i].delta) {
			if d.key != "" {
				descs[d.key[len("d\x00"):]] = true
			}
		}
		keys[r.Proposal.Key()]++
		mechs[records.CanonicalName(r.Proposal.Mechanism)] = true
	}
	b := priorBody{Catalogue: catalogueDigest(cfg.Base.Cards), Terms: cfg.Terms}
	if cfg.Terms.Effects {
		b.Effector = cfg.Base.Effects.ID()
	}
	b.Descriptors = sortedKeys(descs)
	b.Proposals, b.Mechanisms = []string{}, []string{}
	if cfg.Terms.Proposal {
		for _, k := range sortedKeys(keys) {
			if keys[k] >= cfg.MinProposalRecords {
				b.Proposals = append(b.Proposals, k)
			}
		}
	}
	if cfg.Terms.Mechanism {
		b.Mechanisms = append(b.Mechanisms, sortedKeys(mechs)...)
	}
	b.Corpus = PriorCorpus{Records: len(p.rs), Tasks: len(tasks), InfeasibleSigmas: cfg.Base.InfeasibleSigmas,
		Ridge: cfg.Ridge, Clip: cfg.Clip, Seed: cfg.Seed}
	return b
}

// sortedKeys returns m's keys sorted.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// target is a record's gain in σ_e units as the embedded model reads it:
// an infeasible record counts infeasible, and with clip > 0 the value is
// clipped to ±clip (EmbeddedConfig.ClipSigmas, PriorFitConfig.Clip).
func target(r records.Record, infeasible, clip float64) float64 {
	y := r.Gain / r.Task.SeedNoise
	if r.Infeasible != "" {
		y = infeasible
	}
	if clip > 0 {
		y = max(-clip, min(clip, y))
	}
	return y
}

// fitMean solves the ridge regression of PriorFitConfig.Ridge on p's
// records for body's layout.
func fitMean(ctx context.Context, cfg PriorFitConfig, body priorBody, p *prepared) (*Prior, error) {
	nf := 0
	d := len(body.Descriptors)
	if body.Terms.Proposal {
		nf += len(body.Proposals) * (1 + d)
	}
	if body.Terms.Mechanism {
		nf += len(body.Mechanisms) * (1 + d)
	}
	if body.Terms.Effects {
		nf += 3 * d
	}
	body.Coef = make([]float64, nf)
	lay, err := newPrior(body)
	if err != nil {
		return nil, err
	}
	a := make([]float64, nf*nf) // lower triangle of XᵀX
	rhs := make([]float64, nf)
	ss := make([]float64, nf)
	var row []sparse
	for i, r := range p.rs {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrPrior, err)
			}
		}
		var known bool
		row, known = lay.features(p.fx[i].desc, p.fx[i].delta, r.Proposal, row[:0])
		y := target(r, cfg.Base.InfeasibleSigmas, cfg.Clip)
		if !known {
			y -= fallbackMean(cfg.Base, r.Proposal)
		}
		for _, e := range row {
			rhs[e.i] += e.v * y
			ss[e.i] += e.v * e.v
			for _, g := range row {
				if g.i <= e.i {
					a[e.i*nf+g.i] += e.v * g.v
				}
			}
		}
	}
	sym := mat.NewSymDense(nf, nil)
	for i := range nf {
		pen := cfg.Ridge * ss[i] / float64(len(p.rs))
		if pen == 0 {
			pen = cfg.Ridge // a feature no record has: its coefficient is 0
		}
		for j := 0; j < i; j++ {
			sym.SetSym(i, j, a[i*nf+j])
		}
		sym.SetSym(i, i, a[i*nf+i]+pen)
	}
	var ch mat.Cholesky
	if ok := ch.Factorize(sym); !ok {
		return nil, fmt.Errorf("%w: the ridge system of %d features is not positive definite", ErrPrior, nf)
	}
	w := mat.NewVecDense(nf, nil)
	if err := ch.SolveVecTo(w, mat.NewVecDense(nf, rhs)); err != nil {
		return nil, fmt.Errorf("%w: ridge solve: %w", ErrPrior, err)
	}
	for i := range nf {
		body.Coef[i] = w.AtVec(i)
	}
	lay.body.Coef = body.Coef
	if err := lay.checkCoef(); err != nil {
		return nil, fmt.Errorf("%w: ridge %w", ErrPrior, err)
	}
	return newPrior(body)
}

// fitHyper returns the configuration of cfg's grid (each with mean prior
// mp) with the highest summed log marginal likelihood over the blocks of
// rs (sorted canonically), that sum and the number of blocks; with fewer
// than 10 records, cfg.Base with no search.
func fitHyper(ctx context.Context, cfg PriorFitConfig, mp *Prior, rs []records.Record) (EmbeddedConfig, float64, int, error) {
	base := cfg.Base
	base.Prior = mp
	if len(rs) < 10 {
		return base, 0, 0, nil
	}
	byTask := map[string][]records.Record{}
	for _, r := range rs {
		byTask[r.Task.ID] = append(byTask[r.Task.ID], r)
	}
	ids := sortedKeys(byTask)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	var blocks []*prepared
	var cur []records.Record
	var flushErr error
	flush := func() {
		if len(cur) > 0 && len(blocks) < cfg.Blocks && flushErr == nil {
			b, err := prepare(ctx, mustRecords(cur), base.effector(), base.readsDesc())
			if err != nil {
				flushErr = err
			} else {
				b.share = true
				blocks = append(blocks, b)
			}
		}
		cur = nil
	}
	for _, id := range ids {
		if len(blocks) == cfg.Blocks {
			break
		}
		tr := byTask[id]
		if len(tr) > cfg.BlockRecords {
			tr = tr[:cfg.BlockRecords]
		}
		if len(cur)+len(tr) > cfg.BlockRecords {
			flush()
		}
		cur = append(cur, tr...)
	}
	flush()
	if flushErr != nil {
		return base, 0, 0, fmt.Errorf("%w: %w", ErrPrior, flushErr)
	}
	grid := cfg.Grid
	if grid == nil {
		grid = TuneGrid(base)
	}
	best, bestLM := base, math.Inf(-1)
	for gi, c := range grid {
		c.Prior = mp
		if err := checkLogMarginal(ctx, c); err != nil {
			return base, 0, 0, fmt.Errorf("%w: grid configuration %d: %w", ErrPrior, gi, err)
		}
		var sum float64
		for bi, b := range blocks {
			if !b.fits(c) {
				nb, err := prepare(ctx, mustRecords(b.rs), c.effector(), c.readsDesc())
				if err != nil {
					return base, 0, 0, fmt.Errorf("%w: grid configuration %d, block %d: %w", ErrPrior, gi, bi, err)
				}
				b = nb
				b.share = true
				blocks[bi] = b
			}
			lm, err := logMarginal(ctx, c, b)
			if err != nil {
				return base, 0, 0, fmt.Errorf("%w: grid configuration %d, block %d: %w", ErrPrior, gi, bi, err)
			}
			sum += lm
		}
		if sum > bestLM {
			best, bestLM = c, sum
		}
	}
	return best, bestLM, len(blocks), nil
}
