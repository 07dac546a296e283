package rwm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/lm2lm/lm2lm/records"
)

// TunedStats counts what a Tuned model did.
type TunedStats struct {
	Tunings   int64 // Tune runs started (one per distinct evidence held, plus retries after errors)
	Hits      int64 // queries whose evidence was already tuned
	Coalesced int64 // queries that waited for a tuning in flight
	Evictions int64 // tuned evidence sets dropped for size
	Len       int   // tuned evidence sets held now
}

// Tuned is the embedded world model whose hyperparameters follow its
// records: for each query it uses the configuration that Tune picks on the
// query's evidence (type-II maximum likelihood over a grid) and predicts
// with an Embedded of that configuration. Its prediction for a query equals
// NewEmbedded(cfg).Predict with cfg, _, _ := Tune(ctx, base, q.Evidence,
// grid): a function of (task, proposal, records), so, as METHOD.md §1
// Research World Model requires, the model is calibrated only by adding
// records to M and changes only when its records do. Like Embedded's, the
// evidence key identifies tasks by ID.
//
// Tuning costs one factorisation per grid configuration (81 for TuneGrid),
// so Tuned runs it once per distinct evidence (keyed by
// Evidence.Fingerprint) and keeps the tuned models of the base.CacheSize
// most recently used evidence sets. A trainer's evidence changes only at
// calibration points (METHOD.md §1 On-policy calibration), so each training
// segment is tuned once, on the records it is calibrated with. Concurrent
// first queries on one evidence wait for a single tuning; a waiter whose
// ctx ends stops waiting, and if the tuning's owner is cancelled the
// waiters tune themselves. A tuning reads its owner's ctx inside every
// factorisation (Tune), so it ends with that ctx; a context of more than
// base.MaxRecords records is an error wrapping ErrTooManyRecords, before
// any factorisation. Errors are never cached. A Tuned is safe for
// concurrent use.
type Tuned struct {
	base EmbeddedConfig
	grid []EmbeddedConfig
	id   string

	// tune is Tune with the chosen configuration's factorisation (tune);
	// tests replace it to hold or fail a tuning.
	tune func(context.Context, EmbeddedConfig, records.Evidence, []EmbeddedConfig) (EmbeddedConfig, float64, *factor, error)

	memo *memo[string, tunedModel] // by Evidence.Fingerprint
}

// tunedModel is the tuned model of one evidence.
type tunedModel struct {
	model *Embedded
	pin   *pinned // the model pinned on the evidence (Pin)
	logML float64
}

var (
	_ WorldModel = (*Tuned)(nil)
	_ Identifier = (*Tuned)(nil)
	_ Pinner     = (*Tuned)(nil)
)

// NewTuned returns the self-tuning embedded model that searches grid
// (TuneGrid(base) when nil) around base; with fewer than 10 records it uses
// base (see Tune). An invalid base or grid configuration or an empty
// non-nil grid is an error wrapping ErrConfig.
func NewTuned(base EmbeddedConfig, grid []EmbeddedConfig) (*Tuned, error) {
	if err := base.Validate(); err != nil {
		return nil, configError(err)
	}
	if grid == nil {
		grid = TuneGrid(base)
	}
	if len(grid) == 0 {
		return nil, fmt.Errorf("%w: tuned: empty grid", ErrConfig)
	}
	grid = append([]EmbeddedConfig(nil), grid...)
	h := sha256.New()
	fmt.Fprintf(h, "base %s\n", embeddedDigest(base))
	for i, c := range grid {
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("%w: tuned: grid[%d]: %w", ErrConfig, i, err)
		}
		fmt.Fprintf(h, "grid %s\n", embeddedDigest(c))
	}
	return &Tuned{
		base: base, grid: grid, tune: tune, memo: newMemo[string, tunedModel](tunedPolicy(base.CacheSize)),
		id: "rwm.Tuned/" + hex.EncodeToString(h.Sum(nil)[:8]),
	}, nil
}

// tunedPolicy is how a Tuned holding size tuned models memoises: a tuning
// in flight is held and bounded from its start; a waiter counts as
// Coalesced when it joins; it tunes after its owner's cancellation only
// while its own ctx is live.
func tunedPolicy(size int) memoPolicy {
	return memoPolicy{name: "rwm: tuned", size: size, boundFlights: true, coalesceOnJoin: true}
}

// embeddedDigest is configDigest with the priors keyed as NewEmbedded keys
// them.
func embeddedDigest(c EmbeddedConfig) string {
	priors := map[string]records.Prior{}
	for m, p := range c.Priors {
		priors[records.CanonicalName(m)] = p
	}
	return configDigest(c, priors)
}

// ID names the model, its base configuration and its grid.
func (t *Tuned) ID() string { return t.id }

// Base returns the base configuration.
func (t *Tuned) Base() EmbeddedConfig { return t.base }

// Grid returns a copy of the grid that Tune searches.
func (t *Tuned) Grid() []EmbeddedConfig { return append([]EmbeddedConfig(nil), t.grid...) }

// Stats returns a snapshot of the model's counters.
func (t *Tuned) Stats() TunedStats {
	s := t.memo.snapshot()
	return TunedStats{Tunings: s.Misses, Hits: s.Hits, Coalesced: s.Coalesced, Evictions: s.Evictions, Len: s.Len}
}

// Predict tunes on q.Evidence (once per distinct evidence) and returns the
// tuned embedded model's prediction of q.
func (t *Tuned) Predict(ctx context.Context, q Query) (Prediction, error) {
	if err := ctx.Err(); err != nil {
		return Prediction{}, fmt.Errorf("rwm: tuned: %w", err)
	}
	if err := q.Validate(); err != nil {
		return Prediction{}, err
	}
	e, err := t.tuned(ctx, q.Evidence)
	if err != nil {
		return Prediction{}, err
	}
	return e.model.Predict(ctx, q)
}

// Config returns the configuration Tune picks on ev and its log marginal
// likelihood (LogMarginal), tuning if ev is new: what Predict uses for
// queries with that evidence.
func (t *Tuned) Config(ctx context.Context, ev records.Evidence) (EmbeddedConfig, float64, error) {
	if err := ctx.Err(); err != nil {
		return t.base, 0, fmt.Errorf("rwm: tuned: %w", err)
	}
	e, err := t.tuned(ctx, ev)
	if err != nil {
		return t.base, 0, err
	}
	return e.model.Config(), e.logML, nil
}

// Pin returns the embedded model of the configuration Tune picks on ev,
// tuning if ev is new (the tuned model Predict uses for queries with that
// evidence, so it shares its factorisations). A query whose evidence
// differs from ev is predicted with ev's hyperparameters, not re-tuned:
// lm2lm.Config.HeldOutTask pins the model on M without a task and
// predicts that task's states, whose evidences add their histories' real
// records, at one tuning per task instead of one per state.
//
// A query whose evidence holds ev's records and more is factorised from
// what the pinned model derives from ev's records once (their effects and
// features, and the kernel's costly descriptor and loss terms of their
// pairs, once per value of the context's descriptor statistics), so such
// a state costs the kernel's other terms over its pairs and one
// factorisation instead of a build of its Gram matrix from the records.
// Its prediction is NewEmbedded(cfg).Predict's to rounding (the same sums
// in the same order up to the order in which names are interned; tests
// hold them within 1e-9 relative), and depends on the query alone, not
// on what was predicted before.
func (t *Tuned) Pin(ctx context.Context, ev records.Evidence) (WorldModel, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("rwm: tuned: %w", err)
	}
	e, err := t.tuned(ctx, ev)
	if err != nil {
		return nil, err
	}
	return e.pin, nil
}

// tuned returns ev's tuned model, tuning it or waiting for the tuning in
// flight.
func (t *Tuned) tuned(ctx context.Context, ev records.Evidence) (tunedModel, error) {
	m, _, err := t.memo.do(ctx, ev.Fingerprint(), func(ctx context.Context) (tunedModel, error) {
		cfg, lm, f, err := t.tune(ctx, t.base, ev, t.grid)
		if err != nil {
			return tunedModel{}, fmt.Errorf("rwm: tuned: tuning on %d records: %w", ev.Len(), err)
		}
		m, err := NewEmbedded(cfg)
		if err != nil {
			return tunedModel{}, fmt.Errorf("rwm: tuned: tuned configuration: %w", err)
		}
		if f != nil {
			// The tuning's factorisation of ev is the one m would build.
			m.factors.do(ctx, ev.Fingerprint(), func(context.Context) (*factor, error) { return f, nil })
		}
		return tunedModel{model: m, pin: newPinned(m, ev), logML: lm}, nil
	})
	return m, err
}
