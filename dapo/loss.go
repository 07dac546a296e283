package dapo

import "math"

// Result is the output of Evaluate.
type Result struct {
	// Loss is the aggregated surrogate loss (to be minimised).
	Loss float64
	// Grad[i][t] is ∂Loss/∂NewLogProbs[t] of sequence i.
	Grad [][]float64
	// Tokens is the number of tokens in the batch.
	Tokens int
	// ClipFrac is the fraction of tokens whose gradient an ε clip zeroed;
	// DualClipFrac the fraction zeroed by the dual clip.
	ClipFrac, DualClipFrac float64
}

// Loss returns the token-level clipped surrogate loss of the batch and its
// gradient with respect to each sequence's NewLogProbs (METHOD.md §1 Policy
// optimisation). See Evaluate for the formula.
func Loss(cfg LossConfig, seqs []Sequence) (loss float64, grad [][]float64) {
	r := Evaluate(cfg, seqs)
	return r.Loss, r.Grad
}

// Evaluate computes the loss, its gradient and clip statistics in one pass.
//
// Per token t of a sequence with advantage A, ratio ρ = exp(new_t − old_t):
//
//	ℓ = −min(ρ·A, clip(ρ, 1−ε_low, 1+ε_high)·A)
//	and, when DualClip c > 0 and A < 0: ℓ = min(ℓ, −c·A)
//
// (dual-clip PPO: a negative advantage's loss is capped at −c·A = c·|A|).
// The gradient ∂ℓ/∂new_t is −A·ρ where the unclipped term is active and 0
// where a clip is active; at a tie the unclipped term counts as active.
//
// Aggregation: TokenMean divides the sum of ℓ over all tokens by the number
// of tokens; SeqMeanTokenMean averages ℓ within each sequence and then over
// the sequences that have at least one token. An empty batch (no tokens)
// has loss 0. Grad has one slice per sequence, of its length. A sequence
// whose OldLogProbs and NewLogProbs differ in length panics.
func Evaluate(cfg LossConfig, seqs []Sequence) Result {
	res := Result{Grad: make([][]float64, len(seqs))}
	nonEmpty := 0
	for _, s := range seqs {
		if len(s.OldLogProbs) != len(s.NewLogProbs) {
			panic("dapo: Loss: sequence has len(OldLogProbs) != len(NewLogProbs)")
		}
		res.Tokens += len(s.NewLogProbs)
		if len(s.NewLogProbs) > 0 {
			nonEmpty++
		}
	}
	if res.Tokens == 0 {
		for i, s := range seqs {
			res.Grad[i] = make([]float64, len(s.NewLogProbs))
		}
		return res
	}
	// One backing array for all gradients.
	back := make([]float64, res.Tokens)
	lo, hi, c := 1-cfg.EpsLow, 1+cfg.EpsHigh, cfg.DualClip
	var total float64
	var clipped, dual int
	for i, s := range seqs {
		n := len(s.NewLogProbs)
		g := back[:n:n]
		back = back[n:]
		res.Grad[i] = g
		if n == 0 {
			continue
		}
		var scale float64
		switch cfg.Aggregation {
		case SeqMeanTokenMean:
			scale = 1 / (float64(n) * float64(nonEmpty))
		default:
			scale = 1 / float64(res.Tokens)
		}
		a := s.Advantage
		var seqSum float64
		for t := range n {
			rho := math.Exp(s.NewLogProbs[t] - s.OldLogProbs[t])
			l, d, k := tokenLoss(a, rho, lo, hi, c)
			seqSum += l
			g[t] = d * scale
			switch k {
			case clipEps:
				clipped++
			case clipDual:
				dual++
			}
		}
		total += seqSum * scale
	}
	res.Loss = total
	res.ClipFrac = float64(clipped) / float64(res.Tokens)
	res.DualClipFrac = float64(dual) / float64(res.Tokens)
	return res
}

// ClipFraction returns the fraction of the batch's tokens whose gradient a
// clip (ε or dual) zeroes; 0 for an empty batch.
func ClipFraction(cfg LossConfig, seqs []Sequence) float64 {
	var tokens, clipped int
	lo, hi := 1-cfg.EpsLow, 1+cfg.EpsHigh
	for _, s := range seqs {
		if len(s.OldLogProbs) != len(s.NewLogProbs) {
			panic("dapo: ClipFraction: sequence has len(OldLogProbs) != len(NewLogProbs)")
		}
		for t := range s.NewLogProbs {
			rho := math.Exp(s.NewLogProbs[t] - s.OldLogProbs[t])
			if _, _, k := tokenLoss(s.Advantage, rho, lo, hi, cfg.DualClip); k != clipNone {
				clipped++
			}
			tokens++
		}
	}
	if tokens == 0 {
		return 0
	}
	return float64(clipped) / float64(tokens)
}

type clipKind int

const (
	clipNone clipKind = iota
	clipEps
	clipDual
)

// TokenLoss returns one token's loss ℓ and ∂ℓ/∂ρ for advantage a and ratio
// rho under cfg (see Evaluate). Multiply the derivative by ρ for the
// derivative with respect to the new log-prob.
func TokenLoss(cfg LossConfig, a, rho float64) (loss, dRatio float64) {
	l, _, k := tokenLoss(a, rho, 1-cfg.EpsLow, 1+cfg.EpsHigh, cfg.DualClip)
	if k != clipNone {
		return l, 0
	}
	return l, -a
}

// tokenLoss returns ℓ, ∂ℓ/∂log ρ and which clip is active.
func tokenLoss(a, rho, lo, hi, c float64) (float64, float64, clipKind) {
	switch {
	case a > 0:
		if rho > hi {
			return -hi * a, 0, clipEps
		}
		return -rho * a, -rho * a, clipNone
	case a < 0:
		if rho < lo {
			return -lo * a, 0, clipEps
		}
		if c > 0 && rho > c {
			return -c * a, 0, clipDual
		}
		return -rho * a, -rho * a, clipNone
	}
	return 0, 0, clipNone
}
