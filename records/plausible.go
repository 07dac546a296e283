package records

import (
	"fmt"
	"math"
)

// MaxPlausibleLoss is the largest loss, in either metric, that a measured
// run may report. Library choice: far above any trained model (a uniform
// guess costs 8 bits per byte, or 13.9 nats per token over a vocabulary of
// 2^20 tokens), so only a broken or hostile result reaches it, and every
// gain stays within a range where a world model's arithmetic is finite.
const MaxPlausibleLoss = 64

// Tolerance of Plausible's gain check: |g − (b_e − ℓ)| may be at most
// GainTolSigmas·σ_e + GainTolRel·|b_e|. Library choice: an executor that
// pairs a run with the reference run of the same seed reports g = ℓ_ref(seed)
// − ℓ, which differs from b_e − ℓ by one seed's deviation from the seed mean
// b_e, a few σ_e at most (at most 1.16 σ_e for the three seeds that define
// b_e and σ_e); 10 σ_e plus 1 % of b_e also covers a σ_e estimated low from
// three seeds, while a gain no loss could produce (a unit mistake, an
// invented number) is far outside.
const (
	GainTolSigmas = 10
	GainTolRel    = 0.01
)

// MaxGenericLoss bounds a loss of the generic metric Loss. Library choice:
// a loss in any sensible unit is far below it, and gains stay where a
// world model's arithmetic is finite.
const MaxGenericLoss = 1e9

// Range returns the valid range [lo, hi] of a loss in metric m: every
// metric is non-negative (bits per byte and nats per token are negative
// log-likelihoods); the log-likelihoods are bounded by MaxPlausibleLoss,
// the generic Loss by MaxGenericLoss.
func (m Metric) Range() (lo, hi float64) {
	if m == Loss {
		return 0, MaxGenericLoss
	}
	return 0, MaxPlausibleLoss
}

// Plausible reports, wrapping ErrImplausible, why r cannot be a real
// measurement: for a feasible real (or reference) record, a loss outside
// its metric's Range, or a gain that disagrees with b_e − ℓ by more than
// GainTolSigmas·σ_e + GainTolRel·|b_e|. Other records, and infeasible ones
// (whose gain and loss carry no meaning), are always plausible; invalid
// records are reported by Validate, not here. Executors call it before a
// result becomes a record (builder reports ErrFailed), and Evidence admits
// only plausible records, so an implausible result never reaches a world
// model.
func Plausible(r Record) error {
	if (r.Source != Real && r.Source != Reference) || r.Infeasible != "" {
		return nil
	}
	if lo, hi := r.Task.Metric.Range(); !(r.Loss >= lo && r.Loss <= hi) {
		return fmt.Errorf("%w: record %s/%s: loss %g outside [%g, %g] %s", ErrImplausible,
			Excerpt(r.Task.ID), Excerpt(r.Proposal.Key()), r.Loss, lo, hi, Excerpt(r.Task.Metric))
	}
	want := r.Task.RefLoss - r.Loss
	tol := GainTolSigmas*r.Task.SeedNoise + GainTolRel*math.Abs(r.Task.RefLoss)
	if !(math.Abs(r.Gain-want) <= tol) {
		return fmt.Errorf("%w: record %s/%s: gain %g, but b_e − loss = %g − %g = %g (tolerance %g)", ErrImplausible,
			Excerpt(r.Task.ID), Excerpt(r.Proposal.Key()), r.Gain, r.Task.RefLoss, r.Loss, want, tol)
	}
	return nil
}
