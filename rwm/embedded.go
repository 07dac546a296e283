package rwm

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"

	"github.com/lm2lm/lm2lm/records"
)

// Z90 is the standard normal quantile Φ⁻¹(0.9): a Gaussian's q10 and q90 lie
// Z90 standard deviations either side of its mean.
const Z90 = 1.2815515655446004

// EmbeddedConfig parameterises the embedded in-context world model. All
// gains inside the model are in units of the task's seed noise σ_e, so that
// records of tasks with different scales and metrics share one kernel.
//
// The kernel between (task e, proposal a) and (e′, a′) is
//
//	k = c · (amp(a)·amp(a′) · kTask(e, e′) · kMech(a, a′) + Offset² · kTask(e, e′))
//	kTask = kStruct · ((1 − DescriptorWeight) + DescriptorWeight·kDesc)
//	kStruct = 1 for the same task, CorrFamily for the same family,
//	        CorrMetric for the same metric, CorrAny otherwise
//	kDesc = exp(−Σ_n (asinh(d_n) − asinh(d′_n))² / (2·DescriptorLengthscale²))
//	kMech = CorrOtherMech + [same mechanism]·((CorrMech − CorrOtherMech)
//	        + (1 − CorrMech)·Π_params (Mismatch + (1 − Mismatch)·m))
//
// where d_n are the tasks' named numeric descriptors (records.Task
// Descriptors; a name one task lacks counts as 0), and m compares one named
// parameter: exp(−(φ(x)−φ(y))²/(2·Lengthscale²))
// with φ(x) = asinh(x/NumericScale) for numbers (a log scale for values ≫
// NumericScale, so factors 2 and 4 are as close as 0.1 and 0.2), equality
// for other values, 1 when both proposals omit it and 0 when one omits it.
// The Offset term is a task-level shift shared by all proposals of related
// tasks (on a well-tuned reference most changes lose). Each term is a
// positive semi-definite kernel (an indicator of a shared attribute, a
// squared-exponential on a fixed feature, their sums and products), so the
// Gram matrix is a covariance. Observation noise c·NoiseSigmas² is added on
// the diagonal.
//
// Hyperparameters are fixed (library choice: documented, reproducible, the
// same for every host; see the defaults below) except one overall scale c,
// "simply tuned" from the records in closed form: with K₁ the Gram matrix
// at c = 1 and r = y − μ the records' deviations from the prior mean, c is
// the posterior mean of an inverse-gamma prior worth ScalePseudoRecords
// records at c = 1, c = (ν₀ + rᵀK₁⁻¹r)/(ν₀ + n). c leaves the posterior
// mean unchanged and scales every variance, so q10/q90 stay calibrated on a
// host whose gains are far larger (or smaller) than a few σ_e. With no
// records c = 1.
type EmbeddedConfig struct {
	// SignalSigmas is amp(a), the prior standard deviation of a gain in σ_e
	// units for a mechanism without a prior; default 2.5. Library choice:
	// METHOD.md §1 Headline results report gains of a few σ_e (7.29 σ_e for
	// the best proposer's Avg@4, most base proposals below 0).
	SignalSigmas float64
	// MeanSigmas is the prior mean gain in σ_e units for a mechanism
	// without a prior; default 0 (no opinion).
	MeanSigmas float64
	// NoiseSigmas is the observation noise of one record's gain in σ_e
	// units; default 1: a gain measured against the reference differs from
	// the expected gain by about one seed noise σ_e (METHOD.md §1
	// Vocabulary).
	NoiseSigmas float64
	// OffsetSigmas is the prior standard deviation (σ_e units) of a shift
	// shared by every proposal on a task and, through kTask, on related
	// tasks; default 2. Library choice: lets the model learn from a few
	// records that most changes on a task win or lose. 0 disables it.
	OffsetSigmas float64
	// FitScale enables the closed-form scale c (see above); default true.
	// With false, c = 1.
	FitScale bool
	// ScalePseudoRecords is ν₀, the weight in records of the prior c = 1;
	// default 4 (library choice: a handful of records already move c, one
	// outlier does not).
	ScalePseudoRecords float64
	// CorrFamily, CorrMetric and CorrAny are kTask for tasks of the same
	// family, of the same metric only, and of neither; defaults 0.8, 0.5,
	// 0.3 (library choice: a mechanism's effect transfers best within a
	// family, METHOD.md §1 Data and evaluation). Need 1 ≥ CorrFamily ≥
	// CorrMetric ≥ CorrAny ≥ 0. An empty Family matches no other task.
	CorrFamily, CorrMetric, CorrAny float64
	// DescriptorWeight is the share of kTask that follows the tasks'
	// descriptors (kDesc above): with 0 (default, library choice: the
	// structural kernel alone, for hosts without descriptors) two tasks of
	// one family are alike whatever their recipes; with w > 0 tasks whose
	// recipes are close (learning rate, widths, budget, data) share more
	// strength than distant ones of the same family. Need 0 ≤ w ≤ 1.
	DescriptorWeight float64
	// DescriptorLengthscale is the squared-exponential lengthscale of kDesc
	// in asinh units summed over descriptors; default 1 (library choice:
	// asinh is a log scale for large values, so one factor e in one
	// descriptor, or a learning rate 10× off in log10 units plus a
	// different optimiser, halves the correlation).
	DescriptorLengthscale float64
	// CorrMech is kMech for the same mechanism with unrelated parameters and
	// CorrOtherMech for different mechanisms; defaults 0.6 and 0.1 (library
	// choice: proposals of one mechanism direction behave alike, METHOD.md §1
	// Vocabulary; a little shared strength across mechanisms lets the model
	// learn that most changes lose). Need 1 ≥ CorrMech ≥ CorrOtherMech ≥ 0.
	CorrMech, CorrOtherMech float64
	// Lengthscale is the squared-exponential lengthscale of numeric
	// parameters in φ units (natural log for large values); default ln 4,
	// so values a factor 2 apart correlate 0.88 and a factor 10 apart 0.25.
	Lengthscale float64
	// NumericScale is the scale below which φ turns from logarithmic to
	// linear, so zero and negative values are allowed; default 1e-6.
	NumericScale float64
	// Mismatch is the per-parameter kernel floor for different values;
	// default 0.3 (library choice: one differing parameter keeps some
	// similarity within a mechanism).
	Mismatch float64
	// InfeasibleSigmas is the gain in σ_e units that an infeasible real
	// record counts as; default −6. Library choice: an infeasible proposal
	// earns reward −c with c = 6 (METHOD.md §1 Reward 1–2), so treating it as
	// an outcome of −c·σ_e makes the model predict about that reward for it
	// and its neighbours, without a separate validity model.
	InfeasibleSigmas float64
	// ClipSigmas, when > 0, clips each record's gain in σ_e units to
	// ±ClipSigmas before the model conditions on it (an infeasible record
	// counts InfeasibleSigmas, clipped alike): a few heavy-tailed gains then
	// do not decide the posterior, as the reward's clip c keeps them from
	// deciding a reward (METHOD.md §1 Reward 1), and a prior fitted with
	// PriorFitConfig.Clip reads its context on the scale it was fitted on.
	// Default 0, no clip (library choice: records are read as measured).
	// Must be finite and ≥ 0.
	ClipSigmas float64
	// Priors maps a mechanism (Proposal.Mechanism, canonical or not) to the
	// expected gain N(Mean·σ_e, (Std·σ_e)²) of METHOD.md §1 Research World
	// Model's "knowledge an LLM would bring" (records.Prior; a catalogue's
	// cards carry them, see PriorsFromCards). A prior sets that mechanism's
	// mean and amp(a); nil = none.
	Priors map[string]records.Prior
	// Cards, when set, is the catalogue that proposals must come from: a
	// proposal with an unknown mechanism or parameter, a number outside
	// [Min, Max] or an enum value outside Choices is predicted Valid=false
	// (structurally invalid). Nil accepts any proposal.
	Cards []records.Card
	// CacheSize is the number of factorised contexts kept (keyed by
	// Evidence.Fingerprint); default 4. Library choice: a training segment
	// uses one fixed context (METHOD.md §1 On-policy calibration), so a few
	// suffice.
	CacheSize int
	// Jitter is added to the Gram matrix's diagonal for numerical safety;
	// default 1e-9.
	Jitter float64
	// DescriptorStandardise makes kDesc compare descriptors in units of
	// their spread over the context's tasks: each asinh(d_n) is centred
	// and divided by its standard deviation across the distinct tasks of
	// the records (a constant descriptor, or one no record's task has,
	// counts 0). Without it (default) raw asinh values are compared, so a
	// one-hot descriptor weighs as much as a tenfold learning rate.
	DescriptorStandardise bool
	// Effects, when set with EffectSigmas > 0, tells what a proposal does to
	// a task's descriptors (see Effector), and the kernel gains the term
	//
	//	S² · Σ_n δ_n(e, a)·δ_n(e′, a′) · kTask(e, e′)
	//
	// with S = EffectSigmas and δ_n the change asinh(after_n) −
	// asinh(before_n) of descriptor n, divided by its root mean square
	// over the context's records that change it (a descriptor no record
	// changes counts 0). It is a first-order model of the loss around each
	// task's reference: a gradient over descriptors that varies smoothly
	// from task to task (through kTask), so proposals of different
	// mechanisms that move the same descriptors (a learning-rate factor, a
	// batch change that rescales the rate, a switch of optimiser) share
	// strength, and a change and its opposite get opposite predictions.
	// Default nil and 0 (off).
	Effects      Effector
	EffectSigmas float64
	// LossSigmas, with Effects, adds a Gaussian process on the loss as a
	// function of the descriptors, L(x) ~ GP(0, G²·exp(−|x − x′|²/(2ℓ²))),
	// with G = LossSigmas and ℓ = LossLengthscale, and models a gain as the
	// difference L(before) − L(after) of the task's descriptors before and
	// after the change: the kernel gains
	//
	//	G²·(k(b, b′) − k(b, a′) − k(a, b′) + k(a, a′))
	//
	// with b, a the standardised descriptors (asinh, centred and scaled by
	// their spread over the context's tasks) before and after. Unlike the
	// first-order effect term, it knows curvature: both a change and its
	// opposite can lose near an optimum. Default 0 (off).
	LossSigmas      float64
	LossLengthscale float64
	// Prior, when set, is a prior pretrained on a corpus of other tasks'
	// records (FitPrior, ReadPrior): its mean function replaces MeanSigmas
	// and the priors' means as every gain's prior mean, for records and
	// queries alike, so the model conditions on its context's records
	// exactly as without it. Prior.Config sets it with the kernel
	// hyperparameters fitted beside it. It is read-only. Default nil.
	Prior *Prior
	// MaxRecords bounds the real records of a context that the model
	// factorises: a query, LogMarginal or Tune on more fails at once with
	// an error wrapping ErrTooManyRecords that names the count and the
	// bound; 0 means DefaultMaxRecords. The bound is an error rather than
	// an approximation (such as keeping the most similar records) because
	// a prediction must be a function of the whole context (METHOD.md §1
	// Research World Model) and a factorisation is shared by every query
	// on it; a host with more records chooses the context it passes.
	MaxRecords int
}

// DefaultMaxRecords is EmbeddedConfig.MaxRecords's default, 4,000 records.
// Library choice: a factorisation holds one n×n float64 matrix (8n² bytes,
// 128 MB at 4,000; the loss and descriptor terms of WithEffects add as
// much again while tuning) and costs n³/3 flops. BenchmarkEmbeddedRecords
// measures a first prediction at 3,000 records in about 3 s and 79 MB
// allocated on two cores, so 4,000 takes seconds; Tune factorises once per
// grid configuration (81 for TuneGrid), minutes at 3,000
// (BenchmarkTunedRecords), so a host tuning large contexts gives Predict a
// ctx with a deadline. At 10,000 records one factorisation needs 800 MB
// and tuning would take hours.
const DefaultMaxRecords = 4000

// ErrTooManyRecords marks a context with more records than
// EmbeddedConfig.MaxRecords.
var ErrTooManyRecords = errors.New("rwm: too many records")

// maxRecords is c.MaxRecords with 0 read as DefaultMaxRecords.
func (c EmbeddedConfig) maxRecords() int {
	if c.MaxRecords == 0 {
		return DefaultMaxRecords
	}
	return c.MaxRecords
}

// checkRecords reports a context of n records beyond c's bound.
func (c EmbeddedConfig) checkRecords(n int) error {
	if m := c.maxRecords(); n > m {
		return fmt.Errorf("rwm: embedded: %d records in context, more than MaxRecords %d: %w", n, m, ErrTooManyRecords)
	}
	return nil
}

// WithEffects returns base reading eff with the effect and loss terms on
// at their documented settings: EffectSigmas 2, LossSigmas 8,
// LossLengthscale 4, and, when base.DescriptorWeight > 0, descriptors
// standardised over the context's tasks with DescriptorLengthscale 4.
// Library choice: the best within-task ranking of the settings measured
// on lab v2's validation landscape (README, "Effects: what a proposal does
// to the task"),
// every other field as in base.
func WithEffects(base EmbeddedConfig, eff Effector) EmbeddedConfig {
	c := base
	c.Effects, c.EffectSigmas, c.LossSigmas, c.LossLengthscale = eff, 2, 8, 4
	if c.DescriptorWeight > 0 {
		c.DescriptorStandardise, c.DescriptorLengthscale = true, 4
	}
	return c
}

// An Effector tells what a proposal does to a task without training
// anything: the task's descriptors (records.Task.Descriptors names) after
// the change, as a host's builder knows them from the configuration it
// builds. An error (the proposal cannot be built on the task) leaves the
// proposal without an effect term. Implementations must be deterministic
// and safe for concurrent use; ID names the mapping for cache keys.
type Effector interface {
	ID() string
	Effect(t records.Task, p records.Proposal) (map[string]float64, error)
}

// DefaultEmbeddedConfig returns the documented defaults.
func DefaultEmbeddedConfig() EmbeddedConfig {
	return EmbeddedConfig{
		SignalSigmas: 2.5, MeanSigmas: 0, NoiseSigmas: 1, OffsetSigmas: 2,
		FitScale: true, ScalePseudoRecords: 4,
		CorrFamily: 0.8, CorrMetric: 0.5, CorrAny: 0.3,
		CorrMech: 0.6, CorrOtherMech: 0.1,
		Lengthscale: math.Log(4), NumericScale: 1e-6, Mismatch: 0.3,
		DescriptorWeight: 0, DescriptorLengthscale: 1,
		InfeasibleSigmas: -6, CacheSize: 4, Jitter: 1e-9, MaxRecords: DefaultMaxRecords,
	}
}

// effects reports whether the effect term is on.
func (c EmbeddedConfig) effects() bool { return c.Effects != nil && c.EffectSigmas > 0 }

// loss reports whether the loss-difference term is on.
func (c EmbeddedConfig) loss() bool { return c.Effects != nil && c.LossSigmas > 0 }

// Validate reports the first problem with c.
func (c EmbeddedConfig) Validate() error {
	fin := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	in01 := func(v float64) bool { return v >= 0 && v <= 1 }
	switch {
	case !fin(c.SignalSigmas) || c.SignalSigmas <= 0:
		return fmt.Errorf("rwm: embedded: SignalSigmas %g, want > 0", c.SignalSigmas)
	case !fin(c.OffsetSigmas) || c.OffsetSigmas < 0:
		return fmt.Errorf("rwm: embedded: OffsetSigmas %g, want ≥ 0", c.OffsetSigmas)
	case !fin(c.ScalePseudoRecords) || c.ScalePseudoRecords < 0 || (c.FitScale && c.ScalePseudoRecords == 0):
		return fmt.Errorf("rwm: embedded: ScalePseudoRecords %g, want > 0 (≥ 0 without FitScale)", c.ScalePseudoRecords)
	case !fin(c.MeanSigmas):
		return fmt.Errorf("rwm: embedded: MeanSigmas %g, want finite", c.MeanSigmas)
	case !fin(c.NoiseSigmas) || c.NoiseSigmas <= 0:
		return fmt.Errorf("rwm: embedded: NoiseSigmas %g, want > 0", c.NoiseSigmas)
	case !in01(c.CorrFamily) || !in01(c.CorrMetric) || !in01(c.CorrAny) ||
		c.CorrFamily < c.CorrMetric || c.CorrMetric < c.CorrAny:
		return fmt.Errorf("rwm: embedded: task correlations %g, %g, %g, want 1 ≥ family ≥ metric ≥ any ≥ 0",
			c.CorrFamily, c.CorrMetric, c.CorrAny)
	case !in01(c.CorrMech) || !in01(c.CorrOtherMech) || c.CorrMech < c.CorrOtherMech:
		return fmt.Errorf("rwm: embedded: mechanism correlations %g, %g, want 1 ≥ same ≥ other ≥ 0",
			c.CorrMech, c.CorrOtherMech)
	case !fin(c.Lengthscale) || c.Lengthscale <= 0:
		return fmt.Errorf("rwm: embedded: Lengthscale %g, want > 0", c.Lengthscale)
	case !in01(c.DescriptorWeight):
		return fmt.Errorf("rwm: embedded: DescriptorWeight %g, want in [0, 1]", c.DescriptorWeight)
	case !fin(c.DescriptorLengthscale) || c.DescriptorLengthscale <= 0:
		return fmt.Errorf("rwm: embedded: DescriptorLengthscale %g, want > 0", c.DescriptorLengthscale)
	case !fin(c.NumericScale) || c.NumericScale <= 0:
		return fmt.Errorf("rwm: embedded: NumericScale %g, want > 0", c.NumericScale)
	case !in01(c.Mismatch):
		return fmt.Errorf("rwm: embedded: Mismatch %g, want in [0, 1]", c.Mismatch)
	case !fin(c.InfeasibleSigmas):
		return fmt.Errorf("rwm: embedded: InfeasibleSigmas %g, want finite", c.InfeasibleSigmas)
	case !fin(c.ClipSigmas) || c.ClipSigmas < 0:
		return fmt.Errorf("rwm: embedded: ClipSigmas %g, want finite and ≥ 0", c.ClipSigmas)
	case c.MaxRecords < 0:
		return fmt.Errorf("rwm: embedded: MaxRecords %d, want ≥ 0 (0: DefaultMaxRecords)", c.MaxRecords)
	case c.CacheSize < 1:
		return fmt.Errorf("rwm: embedded: CacheSize %d, want ≥ 1", c.CacheSize)
	case !fin(c.Jitter) || c.Jitter < 0:
		return fmt.Errorf("rwm: embedded: Jitter %g, want ≥ 0", c.Jitter)
	case !fin(c.LossSigmas) || c.LossSigmas < 0 || !fin(c.LossLengthscale) || (c.LossSigmas > 0 && c.LossLengthscale <= 0):
		return fmt.Errorf("rwm: embedded: LossSigmas %g, LossLengthscale %g, want ≥ 0 and > 0", c.LossSigmas, c.LossLengthscale)
	case !fin(c.EffectSigmas) || c.EffectSigmas < 0:
		return fmt.Errorf("rwm: embedded: EffectSigmas %g, want ≥ 0", c.EffectSigmas)
	}
	for m, p := range c.Priors {
		if !fin(p.Mean) || !fin(p.Std) || p.Std <= 0 {
			return fmt.Errorf("rwm: embedded: prior of %q = %+v, want finite mean and std > 0", m, p)
		}
	}
	return c.Prior.fits(c)
}

// PriorsFromCards collects the priors of a catalogue's cards by mechanism.
func PriorsFromCards(cards []records.Card) map[string]records.Prior {
	out := map[string]records.Prior{}
	for _, c := range cards {
		if c.Prior != nil {
			out[records.CanonicalName(c.Mechanism)] = *c.Prior
		}
	}
	return out
}

// Embedded is the embedded in-context world model (METHOD.md §1 Research
// World Model): a Gaussian process on gains in σ_e units over (task,
// proposal) features, conditioned on the real records in the query's
// evidence. Its prediction depends only on the query and its fixed config:
// adding records is its only way to change. It reads only the generic
// vocabulary (task ID, family and metric, σ_e, mechanism and named
// parameters), so it serves any host's proposals.
//
// The predicted gain is the posterior mean times σ_e; Low and High are the
// Gaussian q10 and q90 of a new measurement (posterior variance plus
// observation noise), mean ∓ Z90·sd, in task units. The no-change proposal
// and, with Cards set, proposals outside the catalogue are Valid=false.
// Infeasible records count as outcomes of InfeasibleSigmas (see there).
//
// Factorisations of the Gram matrix are cached by Evidence.Fingerprint, so
// repeated predictions against one context cost O(n²) each instead of
// O(n³). The fingerprint identifies tasks by ID: a context must not hold two
// different tasks with one ID. A context of more than MaxRecords records is
// an error wrapping ErrTooManyRecords (see EmbeddedConfig.MaxRecords). A
// factorisation reads the ctx of the query that started it between blocks
// of rows, so it ends with that query's ctx; queries waiting for it stop
// when theirs ends and, while it is live, factorise again themselves. An
// *Embedded is safe for concurrent use.
type Embedded struct {
	cfg    EmbeddedConfig
	priors map[string]records.Prior
	cards  map[string]records.Card
	// id is ID's value, computed on first use: Tune builds a model per
	// grid configuration and never asks its name.
	id func() string

	// factorise is build; tests replace it to hold or fail a
	// factorisation.
	factorise func(context.Context, *factor, records.Evidence) error

	factors *memo[string, *factor] // by Evidence.Fingerprint
}

var (
	_ WorldModel = (*Embedded)(nil)
	_ Identifier = (*Embedded)(nil)
)

// NewEmbedded returns the embedded model, or cfg.Validate's error wrapping
// ErrConfig for an invalid config.
func NewEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if err := cfg.Validate(); err != nil {
		return nil, configError(err)
	}
	e := &Embedded{cfg: cfg, priors: map[string]records.Prior{}, factors: newMemo[string, *factor](embeddedPolicy(cfg.CacheSize))}
	e.factorise = e.build
	for m, p := range cfg.Priors {
		e.priors[records.CanonicalName(m)] = p
	}
	if cfg.Cards != nil {
		e.cards = map[string]records.Card{}
		for _, c := range cfg.Cards {
			e.cards[records.CanonicalName(c.Mechanism)] = c
		}
	}
	e.id = sync.OnceValue(func() string { return "rwm.Embedded/" + configDigest(e.cfg, e.priors) })
	return e, nil
}

// embeddedPolicy is how an Embedded holding size factorisations memoises:
// as Tuned does (tunedPolicy), a factorisation in flight is held and
// bounded from its start, and when its owner's ctx ends the waiters whose
// ctx is live factorise again. Its counters are not exported.
func embeddedPolicy(size int) memoPolicy {
	return memoPolicy{name: "rwm: embedded", size: size, boundFlights: true, coalesceOnJoin: true}
}

// configDigest names a configuration for cache keys.
func configDigest(c EmbeddedConfig, priors map[string]records.Prior) string {
	h := sha256.New()
	fmt.Fprintf(h, "%v %v %v ", c.OffsetSigmas, c.FitScale, c.ScalePseudoRecords)
	fmt.Fprintf(h, "%v %v %v %v %v %v %v %v %v %v %v %v %v\n", c.SignalSigmas, c.MeanSigmas, c.NoiseSigmas,
		c.CorrFamily, c.CorrMetric, c.CorrAny, c.CorrMech, c.CorrOtherMech, c.Lengthscale, c.NumericScale,
		c.Mismatch, c.InfeasibleSigmas, c.Jitter)
	if c.ClipSigmas != 0 {
		fmt.Fprintf(h, "clip %v\n", c.ClipSigmas)
	}
	if c.DescriptorWeight != 0 {
		fmt.Fprintf(h, "desc %v %v\n", c.DescriptorWeight, c.DescriptorLengthscale)
	}
	if c.DescriptorStandardise {
		fmt.Fprintln(h, "standardise")
	}
	if c.effects() {
		fmt.Fprintf(h, "effects %v %q\n", c.EffectSigmas, c.Effects.ID())
	}
	if c.loss() {
		fmt.Fprintf(h, "loss %v %v %q\n", c.LossSigmas, c.LossLengthscale, c.Effects.ID())
	}
	if c.Prior != nil {
		fmt.Fprintf(h, "pretrained %s\n", c.Prior.Digest())
	}
	names := make([]string, 0, len(priors))
	for m := range priors {
		names = append(names, m)
	}
	slices.Sort(names)
	for _, m := range names {
		fmt.Fprintf(h, "prior %q %v %v\n", m, priors[m].Mean, priors[m].Std)
	}
	for _, card := range c.Cards {
		fmt.Fprintf(h, "card %q", records.CanonicalName(card.Mechanism))
		for _, p := range card.Params {
			fmt.Fprintf(h, " %q %q %v %v %q", p.Name, p.Kind, p.Min, p.Max, p.Choices)
		}
		fmt.Fprintln(h)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// ID names the model and its configuration.
func (e *Embedded) ID() string { return e.id() }

// Config returns the model's configuration.
func (e *Embedded) Config() EmbeddedConfig { return e.cfg }

// Predict returns the posterior predictive gain of q.Proposal on q.Task
// given q.Evidence.
func (e *Embedded) Predict(ctx context.Context, q Query) (Prediction, error) {
	if p, done, err := e.check(ctx, q); done {
		return p, err
	}
	f, err := e.factor(ctx, q.Evidence)
	if err != nil {
		return Prediction{}, err
	}
	return e.predictFactor(f, q)
}

// check returns the answer to q that needs no factorisation (done): an
// ended ctx, an invalid query or context, or a proposal judged invalid
// without the records.
func (e *Embedded) check(ctx context.Context, q Query) (p Prediction, done bool, err error) {
	if err := ctx.Err(); err != nil {
		return Prediction{}, true, fmt.Errorf("rwm: embedded: %w", err)
	}
	if err := q.Validate(); err != nil {
		return Prediction{}, true, err
	}
	if err := e.cfg.checkRecords(q.Evidence.Len()); err != nil {
		return Prediction{}, true, err
	}
	if q.Proposal.IsNoChange() {
		return Prediction{Valid: false, Reason: "no change: the proposal changes nothing"}, true, nil
	}
	if q.Proposal.IsFreeForm() {
		return Prediction{}, true, fmt.Errorf("rwm: embedded: %w: free-form proposal %s has no mechanism card or parameters to compare with the records (use an LLM world model)",
			ErrCannotFeaturise, records.Excerpt(q.Proposal.Key()))
	}
	if reason := e.structural(q.Proposal); reason != "" {
		return Prediction{Valid: false, Reason: "structurally invalid: " + reason}, true, nil
	}
	return Prediction{}, false, nil
}

// predictFactor is Predict of q with f, q.Evidence's factorisation.
func (e *Embedded) predictFactor(f *factor, q Query) (Prediction, error) {
	mean, variance, same := e.posterior(f, q.Task, q.Proposal)
	sigma := q.Task.SeedNoise
	sd := math.Sqrt(f.scale * (variance + e.cfg.NoiseSigmas*e.cfg.NoiseSigmas))
	gain := mean * sigma
	p := Prediction{
		Gain: gain, Low: gain - Z90*sd*sigma, High: gain + Z90*sd*sigma, HasInterval: true, Valid: true,
		Reason: fmt.Sprintf("Gaussian process on %d real records (%d of this task and proposal; scale %.3g): %+.2f σ_e, q10–q90 ±%.2f σ_e",
			len(f.feats), same, f.scale, mean, Z90*sd),
	}
	if err := p.Validate(); err != nil {
		return Prediction{}, fmt.Errorf("rwm: embedded: %w", err)
	}
	return p, nil
}

// structural returns why p does not fit the catalogue, or "", quoting
// p's values through records.Excerpt.
func (e *Embedded) structural(p records.Proposal) string {
	if e.cards == nil {
		return ""
	}
	card, ok := e.cards[records.CanonicalName(p.Mechanism)]
	if !ok {
		return fmt.Sprintf("mechanism %q is not in the catalogue", records.Excerpt(records.CanonicalName(p.Mechanism)))
	}
	specs := map[string]records.ParamSpec{}
	for _, s := range card.Params {
		specs[records.CanonicalName(s.Name)] = s
	}
	names := make([]string, 0, len(p.Params))
	for k := range p.Params {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		v := p.Params[k]
		s, ok := specs[records.CanonicalName(k)]
		if !ok {
			return fmt.Sprintf("mechanism %s has no parameter %q", card.Mechanism, records.Excerpt(records.CanonicalName(k)))
		}
		switch s.Kind {
		case "float", "int":
			x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return fmt.Sprintf("%s.%s = %q is not a number", card.Mechanism, s.Name, records.Excerpt(v))
			}
			if s.Kind == "int" && x != math.Trunc(x) {
				return fmt.Sprintf("%s.%s = %q is not an integer", card.Mechanism, s.Name, records.Excerpt(v))
			}
			if s.Min < s.Max && (x < s.Min || x > s.Max) {
				return fmt.Sprintf("%s.%s = %g is outside [%g, %g]", card.Mechanism, s.Name, x, s.Min, s.Max)
			}
		default:
			if !slices.ContainsFunc(s.Choices, func(c string) bool { return records.CanonicalValue(c) == records.CanonicalValue(v) }) {
				return fmt.Sprintf("%s.%s = %q is not one of %q", card.Mechanism, s.Name, records.Excerpt(v), s.Choices)
			}
		}
	}
	return ""
}

// feat is the kernel's view of one (task, proposal).
type feat struct {
	task, family, metric, mech int32 // interned; −1 = unknown to the context
	params                     []pval
	desc                       []dval // sorted by name; nil unless DescriptorWeight > 0
	delta                      []dval // δ of EmbeddedConfig.Effects, sorted by name
	lb, la                     []dval // descriptors before and after (LossSigmas), sorted by name
	amp, mu                    float64
}

// dval is one task descriptor: x = asinh(value).
type dval struct {
	name int32
	x    float64
}

// pval is one parameter: numeric (x = φ(value)) or categorical (cat).
type pval struct {
	name int32
	num  bool
	x    float64
	cat  string
}

// factor is a factorised context.
type factor struct {
	intern map[string]int32 // shared string table for ids
	feats  []feat
	keys   []string             // "taskID\x00proposal key" per record
	l      blas64.Triangular    // lower Cholesky factor: K = LLᵀ
	alpha  []float64            // K₁⁻¹(y − μ)
	scale  float64              // c
	logDet float64              // log |K₁|
	quad   float64              // rᵀK₁⁻¹r
	dstat  map[int32][2]float64 // descriptor id → mean, 1/sd (DescriptorStandardise)
	drms   map[int32]float64    // descriptor id → 1/rms of its changes (Effects)
}

// fitEffects fits f.drms on the records' changes and scales them.
func (f *factor) fitEffects() {
	ss, n := map[int32]float64{}, map[int32]float64{}
	for i := range f.feats {
		for _, d := range f.feats[i].delta {
			ss[d.name] += d.x * d.x
			n[d.name]++
		}
	}
	f.drms = map[int32]float64{}
	for name, v := range ss {
		if v > 0 {
			f.drms[name] = 1 / math.Sqrt(v/n[name])
		}
	}
	for i := range f.feats {
		f.scaleEffects(f.feats[i].delta)
	}
}

// scaleEffects divides ds by their root mean squares (0 for names the
// records never change).
func (f *factor) scaleEffects(ds []dval) {
	for j := range ds {
		ds[j].x *= f.drms[ds[j].name]
	}
}

// fitStats fits f.dstat on the records' distinct tasks.
func (f *factor) fitStats() {
	type acc struct{ s, ss, n float64 }
	accs := map[int32]*acc{}
	seen := map[int32]bool{}
	for i := range f.feats {
		ft := &f.feats[i]
		if seen[ft.task] {
			continue
		}
		seen[ft.task] = true
		for _, d := range ft.desc {
			a := accs[d.name]
			if a == nil {
				a = &acc{}
				accs[d.name] = a
			}
			a.s += d.x
			a.ss += d.x * d.x
			a.n++
		}
	}
	nt := float64(len(seen))
	f.dstat = map[int32][2]float64{}
	for name, a := range accs {
		m := a.s / nt // a task without the name counts 0
		v := a.ss/nt - m*m
		inv := 0.0
		if v > 1e-12 {
			inv = 1 / math.Sqrt(v)
		}
		f.dstat[name] = [2]float64{m, inv}
	}
}

// transform standardises ft's descriptors (desc with std, lb and la
// always) with f.dstat.
func (f *factor) transform(ft *feat, std bool) {
	if f.dstat == nil {
		return
	}
	if std {
		f.applyStats(ft.desc)
	}
	f.applyStats(ft.lb)
	f.applyStats(ft.la)
}

// applyStats standardises ds in place with f.dstat (names without stats
// become 0).
func (f *factor) applyStats(ds []dval) {
	for j := range ds {
		st, ok := f.dstat[ds[j].name]
		if !ok {
			ds[j].x = 0
			continue
		}
		ds[j].x = (ds[j].x - st[0]) * st[1]
	}
}

// factor returns ev's factorisation, building it or waiting for the one in
// flight.
func (e *Embedded) factor(ctx context.Context, ev records.Evidence) (*factor, error) {
	f, _, err := e.factors.do(ctx, ev.Fingerprint(), func(ctx context.Context) (*factor, error) {
		f := &factor{}
		if err := e.factorise(ctx, f, ev); err != nil {
			return nil, err
		}
		return f, nil
	})
	return f, err
}

// sortRecords sorts records canonically (task ID, proposal key,
// infeasibility, gain, loss, seeds), so that a context's factorisation, and
// so every floating-point result, is independent of the records' order. It
// returns the sorted records with their "task ID NUL proposal key" keys.
func sortRecords(rs []records.Record) ([]records.Record, []string) {
	type kr struct {
		key string
		r   records.Record
	}
	ks := make([]kr, len(rs))
	for i, r := range rs {
		ks[i] = kr{r.Task.ID + "\x00" + r.Proposal.Key(), r}
	}
	slices.SortStableFunc(ks, func(a, b kr) int { return compareRecords(a.key, a.r, b.key, b.r) })
	out := make([]records.Record, len(rs))
	keys := make([]string, len(rs))
	for i, k := range ks {
		out[i], keys[i] = k.r, k.key
	}
	return out, keys
}

// compareRecords is sortRecords' order of a and b, whose keys are ka and
// kb.
func compareRecords(ka string, a records.Record, kb string, b records.Record) int {
	if c := cmp.Compare(ka, kb); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Infeasible, b.Infeasible); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Gain, b.Gain); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Loss, b.Loss); c != 0 {
		return c
	}
	return slices.Compare(a.Seeds, b.Seeds)
}

// build factorises the Gram matrix of ev's records, honouring ctx
// (buildPrepared).
func (e *Embedded) build(ctx context.Context, f *factor, ev records.Evidence) error {
	if err := e.cfg.checkRecords(ev.Len()); err != nil {
		return err
	}
	p, err := prepare(ctx, ev, e.cfg.effector(), e.cfg.readsDesc())
	if err != nil {
		return err
	}
	return e.buildPrepared(ctx, f, p)
}

// featsKey returns the configuration fields the records' features,
// targets and statistics depend on.
func (e *Embedded) featsKey() featsKey {
	c := &e.cfg
	return featsKey{signal: c.SignalSigmas, mean: c.MeanSigmas, numeric: c.NumericScale, infeasible: c.InfeasibleSigmas, clip: c.ClipSigmas,
		readsDesc: c.readsDesc(), std: c.DescriptorStandardise && c.DescriptorWeight > 0, loss: c.loss(), effects: c.effects(), prior: c.Prior}
}

// recordFeatures builds f's interned ids, standardised features, statistics and
// the targets y (σ_e units, minus each record's prior mean) from p's
// records, or, when p is shared by a tuning grid and an earlier
// configuration's agree, takes them from p (the same computation, so
// bit-identical).
func (e *Embedded) recordFeatures(f *factor, p *prepared) []float64 {
	key := e.featsKey()
	if sf := p.feats; p.share && sf != nil && sf.key == key && maps.Equal(sf.priors, e.priors) {
		f.intern, f.feats, f.dstat, f.drms = sf.intern, sf.feats, sf.dstat, sf.drms
		return sf.y
	}
	f.intern = map[string]int32{}
	var y []float64
	f.feats, y = e.rawFeatures(interner{tab: f.intern, add: true}, p.rs, p.fx)
	if key.std || key.loss {
		f.fitStats()
	}
	for i := range f.feats {
		f.transform(&f.feats[i], key.std)
	}
	if key.effects {
		f.fitEffects()
	}
	if p.share {
		p.feats = &sharedFeats{key: key, priors: e.priors, intern: f.intern, feats: f.feats, y: y, dstat: f.dstat, drms: f.drms}
	}
	return y
}

// rawFeatures returns the features of rs, whose effects are fx, interned
// into in, before the context's statistics standardise them, and their
// targets.
func (e *Embedded) rawFeatures(in interner, rs []records.Record, fx []*effect) ([]feat, []float64) {
	feats := make([]feat, len(rs))
	y := make([]float64, len(rs))
	for i, r := range rs {
		feats[i] = e.featuresOf(in, r.Task, r.Proposal, fx[i])
		y[i] = e.target(r) - feats[i].mu
	}
	return feats, y
}

// target is r's gain in σ_e units, an infeasible record counting
// InfeasibleSigmas, clipped to ±ClipSigmas when that is set.
func (e *Embedded) target(r records.Record) float64 {
	return target(r, e.cfg.InfeasibleSigmas, e.cfg.ClipSigmas)
}

// buildPrepared factorises the Gram matrix of p's records; p must fit
// e's configuration (prepared.fits). It checks ctx every ctxRows rows of
// the Gram matrix and every block of the factorisation, returning a
// wrapped ctx.Err() once it ends.
func (e *Embedded) buildPrepared(ctx context.Context, f *factor, p *prepared) error {
	l, y, err := e.gramPrepared(ctx, f, p)
	if err != nil || l == nil {
		return err
	}
	return factorLower(ctx, &e.cfg, f, l, y)
}

// gramPrepared fills f's features from p's records (p must fit e's
// configuration) and returns the lower triangle of their Gram matrix K₁
// without the noise (gramLower; nil for no records) and the targets.
func (e *Embedded) gramPrepared(ctx context.Context, f *factor, p *prepared) (l, y []float64, err error) {
	n := len(p.rs)
	if err := e.cfg.checkRecords(n); err != nil {
		return nil, nil, err
	}
	f.keys = p.keys
	y = e.recordFeatures(f, p)
	f.scale = 1
	if n == 0 {
		return nil, y, nil
	}
	terms, err := p.pairTerms(ctx, e, f.feats)
	if err != nil {
		return nil, nil, err
	}
	l, err = gramLower(ctx, n, func(i, j int) float64 {
		return terms.kernel(e, &f.feats[i], &f.feats[j], i*(i+1)/2+j)
	})
	return l, y, err
}

// factorGram fills f's factorisation (l, alpha, quad, scale, logDet) of
// the Gram matrix of f.feats, whose entry i ≥ j is k(i, j) (without the
// noise), with targets y. It checks ctx every ctxRows rows and every
// block of the factorisation, returning a wrapped ctx.Err() once it ends.
func (e *Embedded) factorGram(ctx context.Context, f *factor, y []float64, k func(i, j int) float64) error {
	f.scale = 1
	if len(f.feats) == 0 {
		return nil
	}
	l, err := gramLower(ctx, len(f.feats), k)
	if err != nil {
		return err
	}
	return factorLower(ctx, &e.cfg, f, l, y)
}

// gramLower returns the lower triangle of the n×n matrix of entries
// k(i, j), i ≥ j, row-major with stride n, checking ctx every ctxRows
// rows.
func gramLower(ctx context.Context, n int, k func(i, j int) float64) ([]float64, error) {
	l := make([]float64, n*n)
	for i := range n {
		if i%ctxRows == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("rwm: embedded: Gram matrix of %d records: %w", n, err)
			}
		}
		row := l[i*n : i*n+i+1]
		for j := range row {
			row[j] = k(i, j)
		}
	}
	return l, nil
}

// factorLower fills f's factorisation of K₁ + noise under cfg, with l the
// lower triangle of K₁ of f's n > 0 records (gramLower), which it
// factorises in place into L, K = LLᵀ, kept row-major (the forward solve
// L·v = k then reads rows), and y the targets. Of cfg it reads the noise,
// the jitter and the scale's prior only.
func factorLower(ctx context.Context, cfg *EmbeddedConfig, f *factor, l, y []float64) error {
	n := len(y)
	f.scale = 1
	noise := cfg.NoiseSigmas*cfg.NoiseSigmas + cfg.Jitter
	for i := range n {
		l[i*n+i] += noise
	}
	ok, err := choleskyCtx(ctx, l, n)
	if err != nil {
		return fmt.Errorf("rwm: embedded: factorising %d records: %w", n, err)
	}
	if !ok {
		return fmt.Errorf("rwm: embedded: Gram matrix of %d records is not positive definite", n)
	}
	f.l = blas64.Triangular{Uplo: blas.Lower, Diag: blas.NonUnit, N: n, Stride: n, Data: l}
	// α = K⁻¹y = L⁻ᵀL⁻¹y.
	a := slices.Clone(y)
	blas64.Trsv(blas.NoTrans, f.l, blas64.Vector{N: n, Inc: 1, Data: a})
	blas64.Trsv(blas.Trans, f.l, blas64.Vector{N: n, Inc: 1, Data: a})
	f.alpha = a
	f.quad = blas64.Dot(blas64.Vector{N: n, Inc: 1, Data: y}, blas64.Vector{N: n, Inc: 1, Data: f.alpha})
	if cfg.FitScale {
		nu := cfg.ScalePseudoRecords
		f.scale = (nu + f.quad) / (nu + float64(n))
	}
	for i := range n {
		f.logDet += 2 * math.Log(l[i*n+i])
	}
	return nil
}

// posterior returns the posterior mean and variance of the latent gain (σ_e
// units) of (t, p) and how many records share its task and proposal.
func (e *Embedded) posterior(f *factor, t records.Task, p records.Proposal) (mean, variance float64, same int) {
	q := e.features(f.intern, false, t, p)
	if f.dstat != nil {
		f.transform(&q, e.cfg.DescriptorStandardise && e.cfg.DescriptorWeight > 0)
	}
	if f.drms != nil {
		f.scaleEffects(q.delta)
	}
	n := len(f.feats)
	// k(q, q) = amp²: every factor of the kernel is 1 for a point and
	// itself (computed directly, since ids unknown to the context are −1).
	prior := q.amp*q.amp + e.cfg.OffsetSigmas*e.cfg.OffsetSigmas +
		e.cfg.EffectSigmas*e.cfg.EffectSigmas*descDot(q.delta, q.delta)
	if g := e.cfg.LossSigmas; g > 0 && q.la != nil {
		prior += g * g * 2 * (1 - seKernel(q.lb, q.la, e.cfg.LossLengthscale))
	}
	if n == 0 {
		return q.mu, prior, 0
	}
	k := make([]float64, n)
	mean = q.mu
	key := t.ID + "\x00" + p.Key()
	for i := range f.feats {
		k[i] = e.kernel(&q, &f.feats[i])
		mean += k[i] * f.alpha[i]
		if f.keys[i] == key {
			same++
		}
	}
	// v = L⁻¹k, so kᵀK⁻¹k = |v|².
	blas64.Trsv(blas.NoTrans, f.l, blas64.Vector{N: n, Inc: 1, Data: k})
	variance = prior - blas64.Dot(blas64.Vector{N: n, Inc: 1, Data: k}, blas64.Vector{N: n, Inc: 1, Data: k})
	if variance < 0 {
		variance = 0
	}
	return mean, variance, same
}

// features builds the kernel's view of (t, p), calling the Effector. With
// add, new strings are interned into tab; without, unknown strings get id
// −1 (never equal to a record's) and tab is only read, so concurrent
// queries may share it.
func (e *Embedded) features(tab map[string]int32, add bool, t records.Task, p records.Proposal) feat {
	return e.featuresOf(interner{tab: tab, add: add}, t, p, newEffect(t, p, e.cfg.effector(), e.cfg.readsDesc()))
}

// featuresOf builds the kernel's view of (t, p) whose effect is fx.
func (e *Embedded) featuresOf(in interner, t records.Task, p records.Proposal, fx *effect) feat {
	mech := records.CanonicalName(p.Mechanism)
	ft := feat{
		task: in.id("t", t.ID), family: in.id("f", t.Family), metric: in.id("m", string(t.Metric)), mech: in.id("a", mech),
		amp: e.cfg.SignalSigmas, mu: e.cfg.MeanSigmas,
	}
	if pr, ok := e.priors[mech]; ok {
		ft.amp, ft.mu = pr.Std, pr.Mean
	}
	if e.cfg.Prior != nil {
		ft.mu = e.cfg.Prior.mean(t, p, fx, &e.cfg, ft.mu)
	}
	// Names are interned in sorted order, so that a context's ids, and the
	// order of every sum and product over them, do not follow Go's map
	// order: the same records give bit-identical predictions. A name no
	// record uses gets a distinct negative id.
	unknown := int32(-2)
	ft.params = e.paramFeats(in, p, &unknown)
	if e.cfg.readsDesc() && len(fx.desc) > 0 {
		ft.desc = make([]dval, 0, len(fx.desc))
		for _, d := range fx.desc {
			did := in.key(d.key)
			if did == -1 {
				did = unknown
				unknown--
			}
			ft.desc = append(ft.desc, dval{name: did, x: d.x})
		}
		slices.SortFunc(ft.desc, func(a, b dval) int { return cmp.Compare(a.name, b.name) })
	}
	if e.cfg.loss() && fx.built {
		ft.lb = slices.Clone(ft.desc)
		ft.la = in.known(fx.after) // a name no record's task has is standardised to 0 anyway
	}
	if e.cfg.effects() && fx.built {
		ft.delta = in.known(fx.delta) // a name no record changes: its δ would count 0
	}
	return ft
}

// paramFeats returns p's parameters sorted by id, giving names unknown to
// in ids *unknown, *unknown − 1, ….
func (e *Embedded) paramFeats(in interner, p records.Proposal, unknown *int32) []pval {
	var out []pval
	for _, k := range slices.Sorted(maps.Keys(p.Params)) {
		v := p.Params[k]
		nid := in.id("p", records.CanonicalName(k))
		if nid == -1 {
			nid = *unknown
			*unknown--
		}
		pv := pval{name: nid}
		if x, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			pv.num, pv.x = true, math.Asinh(x/e.cfg.NumericScale)
		} else {
			pv.cat = records.CanonicalValue(v)
		}
		out = append(out, pv)
	}
	slices.SortFunc(out, func(a, b pval) int { return cmp.Compare(a.name, b.name) })
	return out
}

// Kernel returns the prior covariance k((ta, pa), (tb, pb)) of the two
// gains in σ_e² units (EmbeddedConfig), without observation noise. It has
// no context, so the terms scaled by one (DescriptorStandardise, the
// effect term's root mean squares, the loss term's standardisation) use raw
// asinh units.
func (e *Embedded) Kernel(ta records.Task, pa records.Proposal, tb records.Task, pb records.Proposal) float64 {
	tab := map[string]int32{}
	fa := e.features(tab, true, ta, pa)
	fb := e.features(tab, true, tb, pb)
	return e.kernel(&fa, &fb)
}

// kernel is k((e, a), (e′, a′)) of EmbeddedConfig without the noise.
func (e *Embedded) kernel(a, b *feat) float64 {
	return e.kernelWith(a, b, e.descTerm(a, b), e.lossTerm(a, b))
}

// descTerm is kDesc of EmbeddedConfig (0 when DescriptorWeight is 0).
func (e *Embedded) descTerm(a, b *feat) float64 {
	if e.cfg.DescriptorWeight > 0 {
		return seKernel(a.desc, b.desc, e.cfg.DescriptorLengthscale)
	}
	return 0
}

// lossTerm is k(b,b′) − k(b,a′) − k(a,b′) + k(a,a′), the loss term of
// EmbeddedConfig before its factor G² (0 when the term is off for a or b).
func (e *Embedded) lossTerm(a, b *feat) float64 {
	if e.cfg.LossSigmas > 0 && a.la != nil && b.la != nil {
		l := e.cfg.LossLengthscale
		return seKernel(a.lb, b.lb, l) - seKernel(a.lb, b.la, l) - seKernel(a.la, b.lb, l) + seKernel(a.la, b.la, l)
	}
	return 0
}

// kernelWith is kernel with kDesc = kd (descTerm) and the loss term's
// kl (lossTerm) given.
func (e *Embedded) kernelWith(a, b *feat, kd, kl float64) float64 {
	c := &e.cfg
	var kt float64
	switch {
	case a.task == b.task && a.task >= 0:
		kt = 1
	case a.family == b.family && a.family >= 0:
		kt = c.CorrFamily
	case a.metric == b.metric && a.metric >= 0:
		kt = c.CorrMetric
	default:
		kt = c.CorrAny
	}
	if w := c.DescriptorWeight; w > 0 {
		kt *= (1 - w) + w*kd
	}
	km := c.CorrOtherMech
	if a.mech == b.mech && a.mech >= 0 {
		km = c.CorrMech + (1-c.CorrMech)*e.paramKernel(a.params, b.params)
	}
	k := a.amp*b.amp*km + c.OffsetSigmas*c.OffsetSigmas
	if s := c.EffectSigmas; s > 0 && len(a.delta) > 0 && len(b.delta) > 0 {
		k += s * s * descDot(a.delta, b.delta)
	}
	k *= kt
	if g := c.LossSigmas; g > 0 && a.la != nil && b.la != nil {
		k += g * g * kl
	}
	return k
}

// seKernel is exp(−|a − b|²/(2l²)) over sparse sorted lists, a name
// missing on one side counting 0: kDesc of EmbeddedConfig (ℓ =
// DescriptorLengthscale) and the loss term's kernel (ℓ = LossLengthscale).
func seKernel(a, b []dval, l float64) float64 {
	var d2 float64
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var d float64
		switch {
		case j == len(b) || (i < len(a) && a[i].name < b[j].name):
			d = a[i].x
			i++
		case i == len(a) || b[j].name < a[i].name:
			d = b[j].x
			j++
		default:
			d = a[i].x - b[j].x
			i++
			j++
		}
		d2 += d * d
	}
	return math.Exp(-d2 / (2 * l * l))
}

// descDot is Σ_n a_n·b_n over the names both lists hold (sorted by name).
func descDot(a, b []dval) float64 {
	var s float64
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i].name < b[j].name:
			i++
		case b[j].name < a[i].name:
			j++
		default:
			s += a[i].x * b[j].x
			i++
			j++
		}
	}
	return s
}

// paramKernel is Π over the union of parameter names of
// Mismatch + (1 − Mismatch)·m (see EmbeddedConfig).
func (e *Embedded) paramKernel(a, b []pval) float64 {
	g := e.cfg.Mismatch
	inv := 1 / (2 * e.cfg.Lengthscale * e.cfg.Lengthscale)
	k := 1.0
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i].name < b[j].name):
			k *= g // only a has it
			i++
		case i == len(a) || b[j].name < a[i].name:
			k *= g // only b has it
			j++
		default:
			var m float64
			x, y := &a[i], &b[j]
			switch {
			case x.num && y.num:
				d := x.x - y.x
				m = math.Exp(-d * d * inv)
			case !x.num && !y.num && x.cat == y.cat:
				m = 1
			}
			k *= g + (1-g)*m
			i++
			j++
		}
	}
	return k
}
