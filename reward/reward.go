package reward

import (
	"errors"
	"fmt"
	"math"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// ErrConfig is wrapped by Config.Validate for every invalid field.
var ErrConfig = errors.New("reward: invalid config")

// MADScale is the factor that turns a median absolute deviation into a
// consistent estimate of a normal standard deviation (METHOD.md §1 Reward 1).
const MADScale = 1.4826

// Config parameterises reward shaping (METHOD.md §1 Reward).
type Config struct {
	// Clip is c: normalised rewards are clipped to [−c, c] and an invalid
	// proposal earns −c. Default 6 (METHOD.md §1 Reward 1–2).
	Clip float64
	// NoOpReward is the reward of a proposal that changes nothing. Default −3
	// (METHOD.md §1 Reward 2). Must lie in [−Clip, Clip].
	NoOpReward float64
	// DupPenalty is δ: a duplicate earns min(scored rewards) − δ. Default 1
	// (METHOD.md §1 Reward 3).
	DupPenalty float64
	// DiversityScale is λ of the bonus λ·σ_G·d̃_i. Default 0.3 (METHOD.md §1
	// Reward 4); 0 disables the bonus.
	DiversityScale float64
	// Pessimism is κ ∈ [0, 1]: when a candidate carries a pessimistic
	// quantile (HasLow), the value normalised is (1−κ)·ĝ + κ·q10. Default 0
	// (off). Library choice beyond the paper (METHOD.md §1 Known weaknesses:
	// rewards ignore prediction uncertainty); κ = 1 rewards the q10 alone.
	Pessimism float64
}

// DefaultConfig returns the paper's defaults: c 6, no-change −3, δ 1, λ 0.3,
// and no pessimism.
func DefaultConfig() Config {
	return Config{Clip: 6, NoOpReward: -3, DupPenalty: 1, DiversityScale: 0.3}
}

// Validate reports the first invalid field, wrapping ErrConfig.
func (c Config) Validate() error {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case !finite(c.Clip) || c.Clip <= 0:
		return fmt.Errorf("%w: Clip = %g, want finite > 0", ErrConfig, c.Clip)
	case !finite(c.NoOpReward) || c.NoOpReward < -c.Clip || c.NoOpReward > c.Clip:
		return fmt.Errorf("%w: NoOpReward = %g, want in [−Clip, Clip] = [%g, %g]", ErrConfig, c.NoOpReward, -c.Clip, c.Clip)
	case !finite(c.DupPenalty) || c.DupPenalty < 0:
		return fmt.Errorf("%w: DupPenalty = %g, want finite ≥ 0", ErrConfig, c.DupPenalty)
	case !finite(c.DiversityScale) || c.DiversityScale < 0:
		return fmt.Errorf("%w: DiversityScale = %g, want finite ≥ 0", ErrConfig, c.DiversityScale)
	case !(c.Pessimism >= 0 && c.Pessimism <= 1):
		return fmt.Errorf("%w: Pessimism = %g, want in [0, 1]", ErrConfig, c.Pessimism)
	}
	return nil
}

// Candidate is one proposal of a group as reward shaping sees it.
type Candidate struct {
	Predicted float64 // ĝ in the task's gain units
	Valid     bool    // false: infeasible or invalid → −Clip
	NoOp      bool    // changes nothing → NoOpReward
	Key       string  // canonical proposal key; a later repeat within the group is a duplicate ("" never matches)
	Repeat    bool    // repeats a proposal of the state's history: a duplicate too
	Mechanism string  // mechanism direction, for the diversity bonus
	// Low is the world model's pessimistic quantile (q10) of the gain, used
	// only when HasLow is set and Config.Pessimism > 0.
	Low    float64
	HasLow bool
}

// Kind says which rule of METHOD.md §1 Reward decided a candidate's base
// reward.
type Kind int

const (
	Scored    Kind = iota // normalised and clipped prediction (rule 1); earns the bonus
	Invalid               // invalid or infeasible, or a NaN prediction: −c (rule 2)
	NoOp                  // changes nothing: NoOpReward (rule 2)
	Duplicate             // repeats an earlier key of the group or the history (rule 3)
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case Scored:
		return "scored"
	case Invalid:
		return "invalid"
	case NoOp:
		return "no-op"
	case Duplicate:
		return "duplicate"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Detail is one candidate's shaped reward and its parts: Reward = Base + Bonus.
type Detail struct {
	Kind   Kind
	Base   float64 // r_i before the bonus; always in [−Clip, Clip]
	Bonus  float64 // b_i = λ·σ_G·d̃_i; 0 unless Kind is Scored
	Reward float64 // R_i
}

// TaskScale returns τ_e = max(σ_e, 1.4826·MAD_e) (METHOD.md §1 Reward 1),
// where MAD_e = stat.Median(|ĝ − stat.Median(ĝ)|) is taken over the finite values of
// predicted (NaN and ±Inf are ignored); the median of an even count is the
// mean of the two middle values. With zero or one finite gain the MAD is 0,
// so τ_e = σ_e. A NaN or negative sigma counts as 0. The result is 0 only
// when both terms are 0; Normalise then treats τ as its limit 0⁺.
func TaskScale(sigma float64, predicted []float64) float64 {
	if !(sigma > 0) {
		sigma = 0
	}
	g := make([]float64, 0, len(predicted))
	for _, v := range predicted {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			g = append(g, v)
		}
	}
	if len(g) < 2 {
		return sigma
	}
	med := stat.Median(g)
	for i, v := range g {
		g[i] = math.Abs(v - med)
	}
	return math.Max(sigma, MADScale*stat.Median(g))
}

// Normalise returns r = clip(gain/tau, −c, c) with c = cfg.Clip
// (METHOD.md §1 Reward 1). A tau that is not > 0 (0, negative or NaN) is
// treated as the limit τ → 0⁺: r = ±c by the sign of gain, and 0 for a zero
// gain. ±Inf gains clip to ±c; a NaN gain returns NaN (Shape scores such a
// candidate as invalid).
func Normalise(gain, tau float64, cfg Config) float64 {
	c := cfg.Clip
	if math.IsNaN(gain) {
		return math.NaN()
	}
	var r float64
	if tau > 0 {
		r = gain / tau
	} else {
		switch {
		case gain > 0:
			r = c
		case gain < 0:
			r = -c
		}
	}
	return math.Max(-c, math.Min(c, r))
}

// Value returns the gain that Shape normalises for cand: ĝ, or
// (1−κ)·ĝ + κ·q10 when cfg.Pessimism κ > 0 and cand.HasLow.
func Value(cfg Config, cand Candidate) float64 {
	if cfg.Pessimism > 0 && cand.HasLow {
		return (1-cfg.Pessimism)*cand.Predicted + cfg.Pessimism*cand.Low
	}
	return cand.Predicted
}

// Rate returns r(s, a; M) of one candidate judged alone (METHOD.md §1
// Reward 1–2 and On-policy calibration): Explain's base reward with its
// precedence (Invalid, then NoOp, then Scored; a NaN Value is Invalid),
// leaving out what depends on the rest of the group or the history (the
// duplicate rule, hence Repeat and Key, and the diversity bonus). The
// trainer rates calibration candidates and reliability monitors by it.
func Rate(cfg Config, scale float64, c Candidate) float64 {
	_, r := rate(cfg, scale, c)
	return r
}

// rate returns the kind and base reward of c under rules 1–2.
func rate(cfg Config, scale float64, c Candidate) (Kind, float64) {
	switch {
	case !c.Valid:
		return Invalid, -cfg.Clip
	case c.NoOp:
		return NoOp, cfg.NoOpReward
	}
	r := Normalise(Value(cfg, c), scale, cfg)
	if math.IsNaN(r) {
		return Invalid, -cfg.Clip
	}
	return Scored, r
}

// Shape returns the reward R_i of every candidate of one group, in order
// (METHOD.md §1 Reward). scale is τ_e (see TaskScale). It is Explain
// without the parts.
func Shape(cfg Config, scale float64, group []Candidate) []float64 {
	out := make([]float64, len(group))
	explain(cfg, scale, group, out, nil)
	return out
}

// Explain returns each candidate's reward with the rule that decided it and
// its bonus (METHOD.md §1 Reward). The rules, with the choices the paper
// leaves open:
//
//   - Precedence: Invalid, then NoOp, then Duplicate, then Scored. A
//     candidate that is not Valid earns −c, and so does one that would be
//     Scored but whose Value is NaN (a prediction that could not be read).
//     A NoOp candidate earns NoOpReward even if it repeats an earlier
//     no-op: it is already penalised as doing nothing.
//   - Scored: r_i = Normalise(Value(cand), scale, cfg).
//   - Duplicate: Repeat is set, or Key is non-empty and equals the Key of an
//     earlier candidate of the group (of any kind). r_i = m − δ, where m is
//     the minimum r over the Scored candidates of the group. No-op, invalid
//     and duplicate candidates do not enter m. If the group has no Scored
//     candidate, m falls back to NoOpReward: a repeat teaches nothing new,
//     so it ranks below doing nothing. r_i is then clamped to [−c, c], so
//     every base reward lies in [−c, c].
//   - Bonus, for Scored candidates only (duplicates, no-ops and invalid
//     ones get none): b_i = λ·σ_G·d̃_i. σ_G is the population standard
//     deviation of the base rewards r of the whole group (all G
//     candidates, before any bonus). d_i = 1/n_i, where n_i counts the
//     candidates of the whole group (any kind) with the same Mechanism
//     string, and d̃_i = d_i / mean(d_j over the Scored candidates j), so
//     the mean d̃ over Scored candidates is 1 and the mean bonus is λ·σ_G.
//
// cfg is used as given; call Validate first.
func Explain(cfg Config, scale float64, group []Candidate) []Detail {
	out := make([]float64, len(group))
	det := make([]Detail, len(group))
	explain(cfg, scale, group, out, det)
	return det
}

// explain writes rewards to out and, when det is non-nil, details to det.
func explain(cfg Config, scale float64, group []Candidate, out []float64, det []Detail) {
	n := len(group)
	if n == 0 {
		return
	}
	var kindsBuf [16]Kind
	kinds := kindsBuf[:0]
	if n > len(kindsBuf) {
		kinds = make([]Kind, 0, n)
	}
	earlier, mechCount := indexGroup(group)
	kinds, minScored, haveScored := rateGroup(cfg, scale, group, earlier, kinds, out)
	m := cfg.NoOpReward
	if haveScored {
		m = minScored
	}
	dup := math.Max(-cfg.Clip, math.Min(cfg.Clip, m-cfg.DupPenalty))
	var sum float64
	for i, k := range kinds {
		if k == Duplicate {
			out[i] = dup
		}
		sum += out[i]
	}
	if det != nil {
		for i, k := range kinds {
			det[i] = Detail{Kind: k, Base: out[i], Reward: out[i]}
		}
	}
	if cfg.DiversityScale == 0 || !haveScored || n < 2 {
		return
	}
	mean := sum / float64(n)
	var ss float64
	for _, r := range out {
		ss += (r - mean) * (r - mean)
	}
	sigma := math.Sqrt(ss / float64(n))
	if sigma == 0 {
		return
	}
	addDiversity(cfg.DiversityScale, sigma, group, kinds, mechCount, out, det)
}

// indexGroup indexes a group larger than smallGroup: earlier[i] says
// whether an earlier candidate has group[i]'s non-empty Key, and
// mechCount counts the candidates of each Mechanism. Small groups (the
// paper's G = 8) scan instead (isEarlierKey, countMechanism): both are nil.
func indexGroup(group []Candidate) (earlier []bool, mechCount map[string]int) {
	n := len(group)
	if n <= smallGroup {
		return nil, nil
	}
	earlier = make([]bool, n)
	seen := make(map[string]bool, n)
	mechCount = make(map[string]int)
	for i, c := range group {
		if c.Key != "" {
			earlier[i] = seen[c.Key]
			seen[c.Key] = true
		}
		mechCount[c.Mechanism]++
	}
	return earlier, mechCount
}

// rateGroup appends each candidate's Kind to kinds and writes its base
// reward to out (0 for a Duplicate, whose reward depends on the others);
// it returns kinds and the least Scored reward, if any was Scored.
// earlier is indexGroup's (nil: scan).
func rateGroup(cfg Config, scale float64, group []Candidate, earlier []bool, kinds []Kind, out []float64) ([]Kind, float64, bool) {
	minScored, haveScored := math.Inf(1), false
	for i, c := range group {
		var k Kind
		var r float64
		if c.Valid && !c.NoOp && (c.Repeat || (earlier != nil && earlier[i]) || (earlier == nil && isEarlierKey(group, i))) {
			k = Duplicate
		} else if k, r = rate(cfg, scale, c); k == Scored {
			minScored, haveScored = math.Min(minScored, r), true
		}
		kinds = append(kinds, k)
		out[i] = r
	}
	return kinds, minScored, haveScored
}

// addDiversity adds the diversity bonus λ·σ_G·d̃_i to the reward out[i]
// of every Scored candidate (and to its Detail, when det is non-nil),
// with lambda λ, sigma σ_G, d_i = 1/n_i for n_i the candidates of the
// group with its Mechanism (mechCount's count, or a scan where it is nil)
// and d̃_i = d_i over the mean d of the Scored candidates.
func addDiversity(lambda, sigma float64, group []Candidate, kinds []Kind, mechCount map[string]int, out []float64, det []Detail) {
	n := len(group)
	var dBuf [16]float64
	d := dBuf[:0]
	if n > len(dBuf) {
		d = make([]float64, 0, n)
	}
	var dSum float64
	var scored int
	for i, k := range kinds {
		var di float64
		if k == Scored {
			if mechCount != nil {
				di = 1 / float64(mechCount[group[i].Mechanism])
			} else {
				di = 1 / float64(countMechanism(group, group[i].Mechanism))
			}
			dSum += di
			scored++
		}
		d = append(d, di)
	}
	dMean := dSum / float64(scored)
	for i, k := range kinds {
		if k != Scored {
			continue
		}
		b := lambda * sigma * d[i] / dMean
		out[i] += b
		if det != nil {
			det[i].Bonus = b
			det[i].Reward = out[i]
		}
	}
}

// smallGroup is the largest group handled by quadratic scans.
const smallGroup = 32

// isEarlierKey reports whether group[i] has a non-empty key that an earlier
// candidate of the group also has.
func isEarlierKey(group []Candidate, i int) bool {
	k := group[i].Key
	if k == "" {
		return false
	}
	for j := range i {
		if group[j].Key == k {
			return true
		}
	}
	return false
}

// countMechanism returns n_i: the candidates of the group with mechanism m.
func countMechanism(group []Candidate, m string) int {
	var n int
	for _, c := range group {
		if c.Mechanism == m {
			n++
		}
	}
	return n
}
