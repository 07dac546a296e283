package rwm

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"

	"github.com/lm2lm/lm2lm/records"
)

// LogMarginal returns the log marginal likelihood of ev's records (their
// gains in σ_e units, infeasible ones at InfeasibleSigmas) under the
// embedded model with cfg: log N(y; μ, c·K₁), with the scale c as the model
// uses it (fitted or 1). Higher is a better explanation of the records. It
// factorises the Gram matrix: O(n³), checking ctx between blocks of rows
// (a wrapped ctx.Err() once it ends). More than cfg.MaxRecords records is
// an error wrapping ErrTooManyRecords.
func LogMarginal(ctx context.Context, cfg EmbeddedConfig, ev records.Evidence) (float64, error) {
	if err := checkLogMarginal(ctx, cfg); err != nil {
		return 0, err
	}
	if err := cfg.checkRecords(ev.Len()); err != nil {
		return 0, err
	}
	p, err := prepare(ctx, ev, cfg.effector(), cfg.readsDesc())
	if err != nil {
		return 0, err
	}
	return logMarginal(ctx, cfg, p)
}

// checkLogMarginal reports why LogMarginal cannot start: an invalid cfg or
// an ended ctx.
func checkLogMarginal(ctx context.Context, cfg EmbeddedConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("rwm: log marginal: %w", err)
	}
	return nil
}

// logMarginal is LogMarginal of a valid cfg on records prepared for it
// (prepared.fits).
func logMarginal(ctx context.Context, cfg EmbeddedConfig, p *prepared) (float64, error) {
	e, err := NewEmbedded(cfg)
	if err != nil {
		return 0, err
	}
	f := &factor{}
	if err := e.buildPrepared(ctx, f, p); err != nil {
		return 0, err
	}
	return f.logML(), nil
}

// logML is the log marginal likelihood of f's records (LogMarginal).
func (f *factor) logML() float64 {
	n := float64(len(f.feats))
	if n == 0 {
		return 0
	}
	c := f.scale
	return -0.5 * (f.quad/c + n*math.Log(c) + f.logDet + n*math.Log(2*math.Pi))
}

// TuneGrid returns the documented grid that Tune searches around base:
// NoiseSigmas × {0.5, 1, 2}, task correlations (family, metric, any) in
// {(0.5, 0.25, 0.1), (0.8, 0.5, 0.3), (0.95, 0.8, 0.6)}, CorrMech in
// {0.3, 0.6, 0.9} and Lengthscale in {ln 2, ln 4, ln 16}: 81 configurations,
// every other field as in base.
func TuneGrid(base EmbeddedConfig) []EmbeddedConfig {
	var out []EmbeddedConfig
	for _, noise := range []float64{0.5, 1, 2} {
		for _, tc := range [][3]float64{{0.5, 0.25, 0.1}, {0.8, 0.5, 0.3}, {0.95, 0.8, 0.6}} {
			for _, mech := range []float64{0.3, 0.6, 0.9} {
				for _, ls := range []float64{math.Log(2), math.Log(4), math.Log(16)} {
					c := base
					c.NoiseSigmas = base.NoiseSigmas * noise
					c.CorrFamily, c.CorrMetric, c.CorrAny = tc[0], tc[1], tc[2]
					c.CorrMech = max(mech, c.CorrOtherMech)
					c.Lengthscale = ls
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// Tune returns the configuration of grid (TuneGrid(base) when nil) with the
// highest LogMarginal on ev, and that value: type-II maximum likelihood, the
// "simply tuned" option of the embedded model. It reads the records only,
// so a tuned model is still a function of (task, proposal, records); retune
// when the records change (at a calibration point, METHOD.md §1 On-policy
// calibration), not between predictions. With fewer than 10 records it
// returns base: too few to choose. Ties go to the earlier configuration.
// The configurations share the records' effects (EmbeddedConfig.Effects):
// the Effector runs once per distinct task and proposal, not once per
// configuration; and those that agree on them share the kernel's
// descriptor and loss terms (TuneGrid's do). Tune checks ctx before each
// configuration and inside each factorisation (LogMarginal), returning a
// wrapped ctx.Err() once it ends; more than base.MaxRecords records (or
// a configuration's MaxRecords) is an error wrapping ErrTooManyRecords,
// before any factorisation.
func Tune(ctx context.Context, base EmbeddedConfig, ev records.Evidence, grid []EmbeddedConfig) (EmbeddedConfig, float64, error) {
	c, lm, _, err := tune(ctx, base, ev, grid)
	return c, lm, err
}

// tune is Tune, returning also the chosen configuration's factorisation
// of ev (the one its Embedded would build: the same sums in the same
// order, bit for bit; nil with an error).
func tune(ctx context.Context, base EmbeddedConfig, ev records.Evidence, grid []EmbeddedConfig) (EmbeddedConfig, float64, *factor, error) {
	if err := base.Validate(); err != nil {
		return base, 0, nil, err
	}
	if err := base.checkRecords(ev.Len()); err != nil {
		return base, 0, nil, err
	}
	if ev.Len() < 10 {
		f, err := baseFactor(ctx, base, ev)
		if err != nil {
			return base, 0, nil, err
		}
		return base, f.logML(), f, nil
	}
	if grid == nil {
		grid = TuneGrid(base)
	}
	for _, c := range grid {
		if err := c.Validate(); err != nil {
			return base, 0, nil, err
		}
		if err := c.checkRecords(ev.Len()); err != nil {
			return base, 0, nil, err
		}
	}
	lead := gramLeads(grid)
	best := tuned{cfg: base, lm: math.Inf(-1), i: -1}
	var p *prepared // shared by the configurations it fits
	for g, c := range grid {
		if lead[g] != g {
			continue
		}
		if err := checkLogMarginal(ctx, c); err != nil {
			return base, 0, nil, err
		}
		if p == nil || !p.fits(c) {
			var err error
			if p, err = prepare(ctx, ev, c.effector(), c.readsDesc()); err != nil {
				return base, 0, nil, err
			}
			p.share = true
		}
		e, err := NewEmbedded(c)
		if err != nil {
			return base, 0, nil, err
		}
		f := &factor{}
		l, y, err := e.gramPrepared(ctx, f, p)
		if err != nil {
			return base, 0, nil, err
		}
		if err := best.considerGroup(ctx, grid, lead, g, f, l, y); err != nil {
			return base, 0, nil, err
		}
	}
	return best.cfg, best.lm, best.f, nil
}

// baseFactor is base's factorisation of ev, as its Embedded builds it: the
// choice when there are too few records to tune on.
func baseFactor(ctx context.Context, base EmbeddedConfig, ev records.Evidence) (*factor, error) {
	if err := checkLogMarginal(ctx, base); err != nil {
		return nil, err
	}
	p, err := prepare(ctx, ev, base.effector(), base.readsDesc())
	if err != nil {
		return nil, err
	}
	e, err := NewEmbedded(base)
	if err != nil {
		return nil, err
	}
	f := &factor{}
	if err := e.buildPrepared(ctx, f, p); err != nil {
		return nil, err
	}
	return f, nil
}

// gramLeads groups the configurations of grid that share K₁: those that
// differ only in what is added to K₁'s diagonal or in the scale's prior
// (TuneGrid's noise levels, sameGram). lead[i] is the first configuration
// of i's group, whose K₁ is built once for the group; each member
// factorises a copy.
func gramLeads(grid []EmbeddedConfig) []int {
	lead := make([]int, len(grid))
	for i := range grid {
		lead[i] = i
		for j := range i {
			if lead[j] == j && sameGram(&grid[j], &grid[i]) {
				lead[i] = j
				break
			}
		}
	}
	return lead
}

// tuned is the best configuration Tune has seen: its log marginal
// likelihood lm, its index i in the grid (-1: none yet, cfg is base) and
// its factorisation f.
type tuned struct {
	cfg EmbeddedConfig
	lm  float64
	i   int
	f   *factor
}

// considerGroup factorises every configuration of grid in g's group (lead
// g) from the group's K₁, whose lower triangle is l (the last member
// overwrites it, the others a copy), with f the lead's gramPrepared
// features and y the targets, and keeps the best so far. The groups are
// visited in order, so ties still go to the earlier configuration.
func (t *tuned) considerGroup(ctx context.Context, grid []EmbeddedConfig, lead []int, g int, f *factor, l, y []float64) error {
	last := g
	for i := g; i < len(grid); i++ {
		if lead[i] == g {
			last = i
		}
	}
	for i := g; i <= last; i++ {
		if lead[i] != g {
			continue
		}
		k := l
		if i < last {
			k = slices.Clone(l)
		}
		fi, err := factorShared(ctx, &grid[i], f, k, y)
		if err != nil {
			return err
		}
		if lm := fi.logML(); lm > t.lm || (lm == t.lm && i < t.i) {
			t.cfg, t.lm, t.i, t.f = grid[i], lm, i, fi
		}
	}
	return nil
}

// factorShared returns cfg's factorisation of the records whose features f0
// holds (gramPrepared by a configuration with the same K₁, sameGram; cfg
// valid), with l the lower triangle of K₁ (nil for no records), which it
// overwrites, and y the targets.
func factorShared(ctx context.Context, cfg *EmbeddedConfig, f0 *factor, l, y []float64) (*factor, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("rwm: log marginal: %w", err)
	}
	f := &factor{intern: f0.intern, feats: f0.feats, keys: f0.keys, dstat: f0.dstat, drms: f0.drms, scale: 1}
	if l == nil {
		return f, nil
	}
	if err := factorLower(ctx, cfg, f, l, y); err != nil {
		return nil, err
	}
	return f, nil
}

// sameGram reports whether configurations a and b give the same Gram
// matrix K₁ and targets on any records: they may differ only in the
// noise and jitter added to its diagonal, the scale's prior, the
// catalogue, the cache size and the records' bound (an Effector is
// named by its ID, as prepared.fits names it).
func sameGram(a, b *EmbeddedConfig) bool {
	// What TuneGrid varies first, then everything else.
	if a.CorrFamily != b.CorrFamily || a.CorrMetric != b.CorrMetric || a.CorrAny != b.CorrAny ||
		a.CorrMech != b.CorrMech || a.Lengthscale != b.Lengthscale {
		return false
	}
	if (a.Effects == nil) != (b.Effects == nil) || (a.Effects != nil && a.Effects.ID() != b.Effects.ID()) {
		return false
	}
	x, y := *a, *b
	for _, c := range []*EmbeddedConfig{&x, &y} {
		c.NoiseSigmas, c.Jitter, c.FitScale, c.ScalePseudoRecords = 0, 0, false, 0
		c.Cards, c.CacheSize, c.MaxRecords, c.Effects = nil, 0, 0, nil
	}
	return reflect.DeepEqual(x, y)
}
