package proposer

import (
	"fmt"
	"math"
)

// Anchor ties the policy to its current parameters: from now on every
// Update also descends β · KL(π_θ(card | s) ‖ π_anchor(card | s)), the exact
// divergence of the card decision at each item's state from the policy as
// it is at this call, averaged over the batch's items, at the items'
// sampling temperature. It keeps what the policy knew at the anchor (e.g.
// which mechanism a state needs, learned by supervision) from being traded
// away by the RL objective alone. β = 0 removes the anchor. Beyond METHOD.md
// §1 Policy optimisation, whose DAPO objective has no KL term; off unless
// called. A β that is negative or not finite is an error wrapping
// ErrConfig. Anchor takes the policy's write lock; checkpoints carry the
// anchor.
func (p *Policy) Anchor(beta float64) error {
	if !(beta >= 0) || math.IsInf(beta, 0) {
		return fmt.Errorf("%w: anchor β = %g, want finite and ≥ 0", ErrConfig, beta)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.ready(); err != nil {
		return fmt.Errorf("proposer: anchor: %w", err)
	}
	if beta == 0 {
		p.anchor, p.anchorBeta = nil, 0
		return nil
	}
	p.anchor, p.anchorBeta = append([]float64(nil), p.theta...), beta
	return nil
}

// cardLogProbs returns the card decision's log-probabilities at the state
// features under parameters theta at temperature temp. The caller holds the
// lock.
func (p *Policy) cardLogProbs(theta []float64, state []int, temp float64) []float64 {
	save := p.theta
	p.theta = theta
	defer func() { p.theta = save }()
	return logSoftmax(p.logits(nil, p.lay.heads[0], state, p.hiddenAct(state), temp))
}

// anchorGrad adds to grad the gradient of β · mean over passes of
// KL(π_θ(card | s) ‖ π_anchor(card | s)) and returns that mean KL. With p =
// π_θ and q = π_anchor at the state, ∂KL/∂u_j = p_j (log p_j − log q_j −
// KL) / T for the card head's raw logits u; the head's weights, bias and
// hidden layer receive it as backward's per-token terms do. The caller
// holds the lock.
func (p *Policy) anchorGrad(passes []pass, grad []float64) float64 {
	if p.anchorBeta == 0 || len(passes) == 0 {
		return 0
	}
	w := p.anchorBeta / float64(len(passes))
	var total float64
	for i := range passes {
		ps := &passes[i]
		lp := ps.logp[0] // the card decision of the current parameters
		lq := p.cardLogProbs(p.anchor, ps.state, ps.temp)
		var kl float64
		for j, a := range lp {
			kl += math.Exp(a) * (a - lq[j])
		}
		total += kl
		h := ps.heads[0]
		bias := h.off + h.dIn*h.nOut
		var dh []float64
		if len(ps.hid) > 0 {
			dh = make([]float64, len(ps.hid))
		}
		for j, a := range lp {
			d := w * math.Exp(a) * (a - lq[j] - kl) / ps.temp
			if d == 0 {
				continue
			}
			grad[bias+j] += d
			for _, f := range ps.feats[0] {
				grad[h.off+f*h.nOut+j] += d
			}
			if dh != nil {
				ps.backHead(d, h.v+j*len(dh), dh, grad)
			}
		}
		if dh != nil {
			ps.backHidden(dh, grad)
		}
	}
	return total / float64(len(passes))
}
