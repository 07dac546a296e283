package rwm

import (
	"context"
	"fmt"
	"math"

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
	n := float64(len(f.feats))
	if n == 0 {
		return 0, nil
	}
	c := f.scale
	return -0.5 * (f.quad/c + n*math.Log(c) + f.logDet + n*math.Log(2*math.Pi)), nil
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
	if err := base.Validate(); err != nil {
		return base, 0, err
	}
	if err := base.checkRecords(ev.Len()); err != nil {
		return base, 0, err
	}
	if ev.Len() < 10 {
		lm, err := LogMarginal(ctx, base, ev)
		return base, lm, err
	}
	if grid == nil {
		grid = TuneGrid(base)
	}
	best, bestLM := base, math.Inf(-1)
	var p *prepared // shared by the configurations it fits
	for _, c := range grid {
		if err := checkLogMarginal(ctx, c); err != nil {
			return base, 0, err
		}
		if err := c.checkRecords(ev.Len()); err != nil {
			return base, 0, err
		}
		if p == nil || !p.fits(c) {
			var err error
			if p, err = prepare(ctx, ev, c.effector(), c.readsDesc()); err != nil {
				return base, 0, err
			}
			p.share = true
		}
		lm, err := logMarginal(ctx, c, p)
		if err != nil {
			return base, 0, err
		}
		if lm > bestLM {
			best, bestLM = c, lm
		}
	}
	return best, bestLM, nil
}
