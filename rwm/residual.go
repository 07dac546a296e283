package rwm

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"

	"github.com/lm2lm/lm2lm/records"
)

// ResidualConfig parameterises Residual: the prior standard deviations, in
// σ_e units, of the offsets a residual is made of, and how a record's gain
// is read. A residual of a record is its real gain minus the base model's
// prediction of it; the residual function g is a Gaussian process with the
// kernel
//
//	k((e, a), (e′, a′)) = σ_m²·[m = m′] + σ_k²·[a = a′]
//	                    + σ_t²·[e = e′] + σ_p²·[e = e′]·[m = m′]
//
// over the task e, the proposal a (by Proposal.Key) and its canonical
// mechanism m: an offset per mechanism shared by every task (the base
// over-rates or under-rates the mechanism), one per proposal, one per
// task, and one per (task, mechanism) pair. Two pairs of another task and
// another mechanism share nothing, so a correction never moves them: the
// correction is local by construction (METHOD.md §1 On-policy
// calibration: the calibration records correct W's over-trust on the
// policy's own proposals).
type ResidualConfig struct {
	// MechanismSigmas is σ_m; default 1. Library choice: a mechanism the
	// base over-rates on the policy's picks is likely over-rated on other
	// tasks too, by less than on the picks themselves.
	MechanismSigmas float64
	// ProposalSigmas is σ_k; default 1. Library choice: as σ_m, for the
	// very proposal (a direction and size of one mechanism).
	ProposalSigmas float64
	// TaskSigmas is σ_t; default 1. Library choice: most changes on a task
	// can win or lose together beyond what the base knows.
	TaskSigmas float64
	// PairSigmas is σ_p; default 2. Library choice: the over-trust a
	// calibration measures is largest where it was measured (METHOD.md §1
	// On-policy calibration: the gap on the calibrated proposals).
	PairSigmas float64
	// NoiseSigmas is the noise of one record's residual; default 1, one
	// seed noise σ_e (METHOD.md §1 Vocabulary), as EmbeddedConfig's.
	NoiseSigmas float64
	// InfeasibleSigmas is the gain an infeasible record counts as; default
	// −6, as EmbeddedConfig's (METHOD.md §1 Reward 2: −c).
	InfeasibleSigmas float64
	// ClipSigmas, when > 0, clips a record's gain and the base's
	// prediction of it to ±ClipSigmas before their difference is taken;
	// default 6, the reward's clip c (METHOD.md §1 Reward 1), so one
	// heavy-tailed gain or prediction does not decide the correction.
	ClipSigmas float64
}

// DefaultResidualConfig returns the defaults documented on ResidualConfig.
func DefaultResidualConfig() ResidualConfig {
	return ResidualConfig{MechanismSigmas: 1, ProposalSigmas: 1, TaskSigmas: 1, PairSigmas: 2, NoiseSigmas: 1,
		InfeasibleSigmas: -6, ClipSigmas: 6}
}

// Validate reports the first field out of range, wrapping ErrConfig: every
// σ finite and ≥ 0 (NoiseSigmas > 0), InfeasibleSigmas finite and ≤ 0,
// ClipSigmas finite and ≥ 0.
func (c ResidualConfig) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"MechanismSigmas", c.MechanismSigmas}, {"ProposalSigmas", c.ProposalSigmas}, {"TaskSigmas", c.TaskSigmas},
		{"PairSigmas", c.PairSigmas}, {"ClipSigmas", c.ClipSigmas}} {
		if !(f.v >= 0 && !math.IsInf(f.v, 1)) {
			return configError(fmt.Errorf("rwm: residual: %s = %g, want finite and ≥ 0", f.name, f.v))
		}
	}
	if !(c.NoiseSigmas > 0 && !math.IsInf(c.NoiseSigmas, 1)) {
		return configError(fmt.Errorf("rwm: residual: NoiseSigmas = %g, want finite and > 0", c.NoiseSigmas))
	}
	if !(c.InfeasibleSigmas <= 0 && !math.IsInf(c.InfeasibleSigmas, -1)) {
		return configError(fmt.Errorf("rwm: residual: InfeasibleSigmas = %g, want finite and ≤ 0", c.InfeasibleSigmas))
	}
	return nil
}

// Residual is a world model that reads the records of a fixed base
// evidence through a base model and every other record of its context as a
// local correction to it (METHOD.md §1 On-policy calibration): a query
// whose evidence is M is answered by the base model on the records of M
// that the base evidence holds, plus the posterior mean of the residual
// process (ResidualConfig) given the residuals of M's other records, each
// the record's real gain minus the base's prediction of it on the same
// records. The trainer's calibration records are those other records when
// the base evidence is M_0, so a calibration moves the predictions of the
// calibrated tasks and mechanisms and no other: a base model whose
// hyperparameters carry strength far across tasks (a pretrained prior's)
// keeps its knowledge, and the over-trust it showed on the policy's
// proposals is corrected where it was measured.
//
// A query whose evidence holds no record beyond the base evidence is the
// base model's prediction, unchanged. The correction shifts the base's
// gain and its interval alike (the width is the base's). Predict depends
// only on the query and the fixed base evidence; fits are memoised by the
// two parts' fingerprints. Residual is safe for concurrent use.
type Residual struct {
	base  WorldModel
	cfg   ResidualConfig
	known map[string]bool // record identities of the base evidence
	id    string
	fits  *memo[string, *residualFit]
	parts *memo[string, evidenceParts] // split, by the evidence's fingerprint
}

// evidenceParts is one evidence split into the records of the base
// evidence and the others.
type evidenceParts struct{ base, rest records.Evidence }

var (
	_ WorldModel = (*Residual)(nil)
	_ Identifier = (*Residual)(nil)
	_ Pinner     = (*Residual)(nil)
)

// residualFits is how many fits a Residual keeps: one per (base part,
// residual part) of the contexts queried, which under a held-out-task
// trainer is one per training task and M. Library choice: the lab's
// largest training split has under 100 tasks.
const residualFits = 256

// NewResidual returns the residual model over base whose base evidence is
// base evidence ev (the trainer's M_0). It fails, wrapping ErrConfig, for
// a nil base or a configuration Validate refuses.
func NewResidual(base WorldModel, ev records.Evidence, cfg ResidualConfig) (*Residual, error) {
	if base == nil {
		return nil, configError(fmt.Errorf("rwm: residual: nil base model"))
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	known := make(map[string]bool, ev.Len())
	for i := 0; i < ev.Len(); i++ {
		known[recordID(ev.At(i))] = true
	}
	id := fmt.Sprintf("residual(%s; %g %g %g %g %g %g %g; %s)", identity(base), cfg.MechanismSigmas, cfg.ProposalSigmas,
		cfg.TaskSigmas, cfg.PairSigmas, cfg.NoiseSigmas, cfg.InfeasibleSigmas, cfg.ClipSigmas, ev.Fingerprint())
	return newResidual(base, cfg, known, id), nil
}

// newResidual returns the model with empty memos.
func newResidual(base WorldModel, cfg ResidualConfig, known map[string]bool, id string) *Residual {
	p := memoPolicy{name: "rwm: residual", size: residualFits}
	return &Residual{base: base, cfg: cfg, known: known, id: id,
		fits: newMemo[string, *residualFit](p), parts: newMemo[string, evidenceParts](p)}
}

// ID names the model: the base's identity, the configuration and the base
// evidence's fingerprint.
func (r *Residual) ID() string { return r.id }

// Config returns the model's configuration.
func (r *Residual) Config() ResidualConfig { return r.cfg }

// recordID is a record's identity: what Evidence.Fingerprint reads of it
// (task, proposal key, gain, loss, seeds, infeasibility).
func recordID(r records.Record) string {
	h := sha256.New()
	var b [8]byte
	h.Write([]byte(r.Task.ID))
	h.Write([]byte{0})
	h.Write([]byte(r.Proposal.Key()))
	h.Write([]byte{0})
	for _, v := range []float64{r.Gain, r.Loss} {
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(v))
		h.Write(b[:])
	}
	for _, s := range r.Seeds {
		binary.LittleEndian.PutUint64(b[:], s)
		h.Write(b[:])
	}
	h.Write([]byte{0})
	h.Write([]byte(r.Infeasible))
	return hex.EncodeToString(h.Sum(nil))
}

// split returns the records of ev that the base evidence holds and the
// others, each in ev's order, memoised by ev's fingerprint: a query
// hashes no record that an earlier query on the same evidence hashed.
func (r *Residual) split(ctx context.Context, ev records.Evidence) (base, rest records.Evidence, err error) {
	p, _, err := r.parts.do(ctx, ev.Fingerprint(), func(context.Context) (evidenceParts, error) {
		b, o := r.splitOnce(ev)
		return evidenceParts{b, o}, nil
	})
	return p.base, p.rest, err
}

// splitOnce is split without the memo.
func (r *Residual) splitOnce(ev records.Evidence) (base, rest records.Evidence) {
	var b, o []records.Record
	for i := 0; i < ev.Len(); i++ {
		if rec := ev.At(i); r.known[recordID(rec)] {
			b = append(b, rec)
		} else {
			o = append(o, rec)
		}
	}
	if len(o) == 0 {
		return ev, records.Evidence{}
	}
	base, _ = records.NewEvidence(b...) // subsets of valid evidence are valid
	rest, _ = records.NewEvidence(o...)
	return base, rest
}

// Predict answers q: the base's prediction on q's records of the base
// evidence, shifted by the residual correction of q's other records.
func (r *Residual) Predict(ctx context.Context, q Query) (Prediction, error) {
	if err := q.Validate(); err != nil {
		return Prediction{}, err
	}
	base, rest, err := r.split(ctx, q.Evidence)
	if err != nil {
		return Prediction{}, err
	}
	bq := q
	bq.Evidence = base
	p, err := r.base.Predict(ctx, bq)
	if err != nil || rest.Len() == 0 || !p.Valid {
		return p, err
	}
	fit, _, err := r.fits.do(ctx, base.Fingerprint()+"\x00"+rest.Fingerprint(), func(ctx context.Context) (*residualFit, error) {
		return r.fit(ctx, base, rest)
	})
	if err != nil {
		return Prediction{}, err
	}
	shift := fit.mean(q.Task.ID, q.Proposal) * q.Task.SeedNoise
	p.Gain += shift
	p.Low += shift
	p.High += shift
	return p, nil
}

// Pin pins the base model, when it is a Pinner, on ev's records of the
// base evidence, and returns the residual model over the pinned base.
func (r *Residual) Pin(ctx context.Context, ev records.Evidence) (WorldModel, error) {
	pn, ok := r.base.(Pinner)
	if !ok {
		return r, nil
	}
	base, _, err := r.split(ctx, ev)
	if err != nil {
		return nil, err
	}
	pinned, err := pn.Pin(ctx, base)
	if err != nil {
		return nil, err
	}
	return newResidual(pinned, r.cfg, r.known, r.id+" pinned"), nil
}

// residualPoint is one record of a fit: where it lies in (task, mechanism,
// proposal).
type residualPoint struct {
	task, mech, key string
}

// residualFit is the residual process conditioned on one context's
// residuals: its configuration, its points and α = (K + σ_n²·I)⁻¹·r.
type residualFit struct {
	cfg   ResidualConfig
	pts   []residualPoint
	alpha []float64
}

// kernel is k of ResidualConfig between two points.
func (c ResidualConfig) kernel(a, b residualPoint) float64 {
	k := 0.0
	if a.mech == b.mech {
		k += c.MechanismSigmas * c.MechanismSigmas
	}
	if a.key == b.key {
		k += c.ProposalSigmas * c.ProposalSigmas
	}
	if a.task == b.task {
		k += c.TaskSigmas * c.TaskSigmas
		if a.mech == b.mech {
			k += c.PairSigmas * c.PairSigmas
		}
	}
	return k
}

// pointOf returns the point of a proposal on a task.
func pointOf(task string, p records.Proposal) residualPoint {
	return residualPoint{task: task, mech: records.CanonicalName(p.Mechanism), key: p.Key()}
}

// mean is the residual's posterior mean, in σ_e units, at a proposal on a
// task.
func (f *residualFit) mean(task string, p records.Proposal) float64 {
	x := pointOf(task, p)
	s := 0.0
	for i, pt := range f.pts {
		if a := f.alpha[i]; a != 0 {
			s += f.cfg.kernel(x, pt) * a
		}
	}
	return s
}

// clip is ClipSigmas's clip (none when it is 0).
func (c ResidualConfig) clip(x float64) float64 {
	if c.ClipSigmas > 0 {
		return max(-c.ClipSigmas, min(c.ClipSigmas, x))
	}
	return x
}

// fit predicts each record of rest with the base model on base, takes the
// residuals and solves for α. A record the base judges invalid (a proposal
// outside its catalogue) has no residual and is left out.
func (r *Residual) fit(ctx context.Context, base, rest records.Evidence) (*residualFit, error) {
	f := &residualFit{}
	var res []float64
	for i := 0; i < rest.Len(); i++ {
		rec := rest.At(i)
		p, err := r.base.Predict(ctx, Query{Task: rec.Task, Proposal: rec.Proposal, Evidence: base})
		if err != nil {
			return nil, fmt.Errorf("rwm: residual: base prediction of a record of %s: %w", records.Excerpt(rec.Task.ID), err)
		}
		if !p.Valid {
			continue
		}
		y := r.cfg.InfeasibleSigmas
		if rec.Infeasible == "" {
			y = rec.Gain / rec.Task.SeedNoise
		}
		res = append(res, r.cfg.clip(y)-r.cfg.clip(p.Gain/rec.Task.SeedNoise))
		f.pts = append(f.pts, pointOf(rec.Task.ID, rec.Proposal))
	}
	f.cfg = r.cfg
	alpha, err := solveResidual(f.cfg, f.pts, res)
	if err != nil {
		return nil, err
	}
	f.alpha = alpha
	return f, nil
}

// solveResidual returns (K + σ_n²·I)⁻¹·res for the points' Gram matrix K,
// by Cholesky factorisation; K is positive semi-definite and σ_n > 0, so
// the system is positive definite.
func solveResidual(c ResidualConfig, pts []residualPoint, res []float64) ([]float64, error) {
	n := len(pts)
	a := make([]float64, n*n)
	for i := range n {
		for j := 0; j <= i; j++ {
			a[i*n+j] = c.kernel(pts[i], pts[j])
		}
		a[i*n+i] += c.NoiseSigmas * c.NoiseSigmas
	}
	ok, err := choleskyCtx(context.Background(), a, n)
	if err != nil || !ok {
		return nil, fmt.Errorf("rwm: residual: Gram matrix of %d records is not positive definite", n)
	}
	// L·z = res, then Lᵀ·α = z.
	x := append([]float64(nil), res...)
	for i := range n {
		s := x[i]
		for j := range i {
			s -= a[i*n+j] * x[j]
		}
		x[i] = s / a[i*n+i]
	}
	for i := n - 1; i >= 0; i-- {
		s := x[i]
		for j := i + 1; j < n; j++ {
			s -= a[j*n+i] * x[j]
		}
		x[i] = s / a[i*n+i]
	}
	return x, nil
}
