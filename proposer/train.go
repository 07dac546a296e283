package proposer

import (
	"context"
	"fmt"
	"math"

	"github.com/lm2lm/lm2lm/dapo"
	"github.com/lm2lm/lm2lm/records"
)

// pass is the forward pass of one token sequence: for every decision t its
// head, active features and full log-probability vector at temperature temp,
// and the state's features and hidden activations (nil without a hidden
// layer), with the parameters they were computed from.
type pass struct {
	toks  []int
	heads []head
	feats [][]int
	logp  [][]float64
	temp  float64
	state []int
	hid   []float64
	theta []float64
	lay   *layout
}

// tokenLogProbs returns log π(toks[t] | ...) for every t.
func (ps *pass) tokenLogProbs() []float64 {
	out := make([]float64, len(ps.toks))
	for t, k := range ps.toks {
		out[t] = ps.logp[t][k]
	}
	return out
}

// forward runs the policy on one encoded sequence.
func (p *Policy) forward(state []int, toks []int, temp float64) pass {
	ps := pass{toks: toks, heads: make([]head, len(toks)), feats: make([][]int, len(toks)),
		logp: make([][]float64, len(toks)), temp: temp, state: state, hid: p.hiddenAct(state),
		theta: p.theta, lay: &p.lay}
	for t := range toks {
		h, x := p.lay.tokenFeatures(nil, state, toks[0], toks, t)
		ps.heads[t], ps.feats[t] = h, x
		ps.logp[t] = logSoftmax(p.logits(nil, h, x, ps.hid, temp))
	}
	return ps
}

// backward adds Σ_t g[t] · ∂ log π(toks[t])/∂θ to grad. With u the raw
// logits and z = u / T, ∂ log π(k)/∂u_j = (1[j = k] − π_j) / T, and
// ∂u_j/∂W[f, j] = x_f, ∂u_j/∂b_j = 1. With a hidden layer h = tanh(a),
// a = U·x_state + c, also ∂u_j/∂V[j, i] = h_i and ∂u_j/∂h_i = V[j, i], and
// the summed ∂/∂h_i of every token reaches c_i and U[f, i] (x_f = 1)
// through ∂h_i/∂a_i = 1 − h_i².
func (ps *pass) backward(g []float64, grad []float64) {
	var dh []float64
	if len(ps.hid) > 0 {
		dh = make([]float64, len(ps.hid))
	}
	for t, k := range ps.toks {
		if g[t] == 0 {
			continue
		}
		h := ps.heads[t]
		scale := g[t] / ps.temp
		bias := h.off + h.dIn*h.nOut
		for j, lp := range ps.logp[t] {
			d := -math.Exp(lp)
			if j == k {
				d++
			}
			d *= scale
			if d == 0 {
				continue
			}
			grad[bias+j] += d
			for _, f := range ps.feats[t] {
				grad[h.off+f*h.nOut+j] += d
			}
			if dh != nil {
				ps.backHead(d, h.v+j*len(dh), dh, grad)
			}
		}
	}
	if dh != nil {
		ps.backHidden(dh, grad)
	}
}

// backHead adds d · h to the gradient of the output weights V[j, ·] at
// theta[v:] and d · V[j, ·] to dh.
func (ps *pass) backHead(d float64, v int, dh, grad []float64) {
	for i, a := range ps.hid {
		grad[v+i] += d * a
		dh[i] += d * ps.theta[v+i]
	}
}

// backHidden carries dh = ∂/∂h through tanh into c and the rows of U of
// the active state features.
func (ps *pass) backHidden(dh, grad []float64) {
	nh, l := len(dh), ps.lay
	for i, a := range ps.hid {
		dh[i] *= 1 - a*a
		grad[l.cOff+i] += dh[i]
	}
	for _, f := range ps.state {
		row := grad[l.uOff+f*nh : l.uOff+(f+1)*nh]
		for i, da := range dh {
			row[i] += da
		}
	}
}

// adam applies one Adam step that descends grad.
func (p *Policy) adam(grad []float64) {
	c := p.cfg.Adam
	p.step++
	bc1 := 1 - math.Pow(c.Beta1, float64(p.step))
	bc2 := 1 - math.Pow(c.Beta2, float64(p.step))
	for i, g := range grad {
		m := c.Beta1*p.adamM[i] + (1-c.Beta1)*g
		v := c.Beta2*p.adamV[i] + (1-c.Beta2)*g*g
		p.adamM[i], p.adamV[i] = m, v
		if m == 0 {
			continue
		}
		p.theta[i] -= c.LR * (m / bc1) / (math.Sqrt(v/bc2) + c.Eps)
	}
}

// prepare encodes and runs the forward pass of every item, checking ctx
// every 64 items. It returns the passes and the summed decision entropy.
func (p *Policy) prepare(ctx context.Context, op string, items []Item, needOld bool) ([]pass, float64, error) {
	passes := make([]pass, len(items))
	var ent float64
	for i, it := range items {
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, 0, fmt.Errorf("proposer: %s: %w", op, err)
			}
		}
		toks, err := p.lay.encode(it.Sample)
		if err != nil {
			return nil, 0, fmt.Errorf("proposer: %s: item %d: %w", op, i, err)
		}
		if math.IsNaN(it.Advantage) || math.IsInf(it.Advantage, 0) {
			return nil, 0, fmt.Errorf("proposer: %s: item %d: %w: advantage %g is not finite", op, i, ErrBadItem, it.Advantage)
		}
		if needOld {
			if len(it.Sample.LogProbs) != len(toks) {
				return nil, 0, fmt.Errorf("proposer: %s: item %d: %w: %d old log-probs for %d tokens", op, i, ErrBadItem, len(it.Sample.LogProbs), len(toks))
			}
			for t, lp := range it.Sample.LogProbs {
				if math.IsNaN(lp) || math.IsInf(lp, 0) || lp > 0 {
					return nil, 0, fmt.Errorf("proposer: %s: item %d: %w: old log-prob[%d] = %g, want finite and ≤ 0", op, i, ErrBadItem, t, lp)
				}
			}
		}
		state := p.lay.stateFeatures(it.State, p.cfg.FamilyBuckets)
		passes[i] = p.forward(state, toks, p.sampleTemp(it.Sample))
		for _, lp := range passes[i].logp {
			ent += entropy(lp)
		}
	}
	return passes, ent, nil
}

// Update applies one DAPO step (METHOD.md §1 Policy optimisation) on batch
// and returns its statistics. Each item's Sample.LogProbs are the old
// (behaviour) log-probs; the new ones are recomputed from the current
// weights at the sample's temperature (the policy's when the sample has
// none). The loss and its gradient with respect to the new log-probs come
// from dapo.Evaluate under PolicyConfig.Loss, are back-propagated through
// the softmax heads and descended with one Adam step. Calling Update again
// on the same batch continues the clipped optimisation of that rollout, as
// the paper's 8 steps per rollout do.
//
// Stats: Loss and Entropy (mean per-decision entropy) are measured before
// the step, ClipFrac is the fraction of tokens whose gradient a clip
// zeroed, and KL is the mean over the batch's tokens of the k3 estimate
// (ρ − 1) − log ρ with ρ = π_new/π_old after the step, an unbiased and
// non-negative estimate of KL(old ‖ new) from tokens drawn from old.
//
// An empty batch changes nothing and returns zero Stats. An item that is
// invalid, not in the catalogue, or whose old log-probs are not one finite
// value ≤ 0 per token fails the whole update (ErrBadItem,
// ErrNotInCatalogue) and changes nothing; so does cancellation, which
// returns a wrapped ctx.Err(). Update takes the policy's write lock.
func (p *Policy) Update(ctx context.Context, batch []Item) (Stats, error) {
	if err := ctx.Err(); err != nil {
		return Stats{}, fmt.Errorf("proposer: update: %w", err)
	}
	if len(batch) == 0 {
		return Stats{}, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	passes, ent, res, grad, err := p.dapoGrad(ctx, batch)
	if err != nil {
		return Stats{}, err
	}
	if err := ctx.Err(); err != nil {
		return Stats{}, fmt.Errorf("proposer: update: %w", err)
	}
	p.adam(grad)

	var kl float64
	for i, it := range batch {
		ps := &passes[i]
		hid := p.hiddenAct(ps.state)
		for t, k := range ps.toks {
			h, x := ps.heads[t], ps.feats[t]
			lp := logSoftmax(p.logits(ps.logp[t][:0], h, x, hid, ps.temp))[k]
			d := lp - it.Sample.LogProbs[t]
			kl += math.Expm1(d) - d
		}
	}
	n := float64(res.Tokens)
	return Stats{
		Loss:     res.Loss,
		ClipFrac: res.ClipFrac + res.DualClipFrac,
		Entropy:  ent / n,
		KL:       kl / n,
		Tokens:   res.Tokens,
	}, nil
}

// dapoGrad returns the forward passes, summed entropy, the DAPO loss result
// and the loss gradient with respect to the parameters. The caller holds
// the lock.
func (p *Policy) dapoGrad(ctx context.Context, batch []Item) ([]pass, float64, dapo.Result, []float64, error) {
	if err := p.ready(); err != nil {
		return nil, 0, dapo.Result{}, nil, fmt.Errorf("proposer: update: %w", err)
	}
	passes, ent, err := p.prepare(ctx, "update", batch, true)
	if err != nil {
		return nil, 0, dapo.Result{}, nil, err
	}
	seqs := make([]dapo.Sequence, len(batch))
	for i, it := range batch {
		seqs[i] = dapo.Sequence{OldLogProbs: it.Sample.LogProbs, NewLogProbs: passes[i].tokenLogProbs(), Advantage: it.Advantage}
	}
	res := dapo.Evaluate(p.cfg.Loss, seqs)
	grad := make([]float64, p.lay.nParams)
	for i := range passes {
		passes[i].backward(res.Grad[i], grad)
	}
	return passes, ent, res, grad, nil
}

// Supervise applies one maximum-likelihood step on examples (the SFT and
// RFT baselines of METHOD.md §1 Data and evaluation): it descends the mean
// per-token negative log-likelihood of the examples' proposals with one
// Adam step. Advantages and old log-probs are ignored; an example's
// Tokens, when present, must match its proposal. Stats.Loss is the mean
// per-token NLL and Stats.Entropy the mean per-decision entropy, both
// before the step; ClipFrac and KL are 0. An empty set changes nothing;
// errors are as for Update.
func (p *Policy) Supervise(ctx context.Context, examples []Item) (Stats, error) {
	if err := ctx.Err(); err != nil {
		return Stats{}, fmt.Errorf("proposer: supervise: %w", err)
	}
	if len(examples) == 0 {
		return Stats{}, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.ready(); err != nil {
		return Stats{}, fmt.Errorf("proposer: supervise: %w", err)
	}
	passes, ent, err := p.prepare(ctx, "supervise", examples, false)
	if err != nil {
		return Stats{}, err
	}
	tokens := 0
	for i := range passes {
		tokens += len(passes[i].toks)
	}
	var nll float64
	grad := make([]float64, p.lay.nParams)
	g := make([]float64, 0, 8)
	for i := range passes {
		g = g[:0]
		for t, k := range passes[i].toks {
			nll -= passes[i].logp[t][k]
			g = append(g, -1/float64(tokens))
		}
		passes[i].backward(g, grad)
	}
	if err := ctx.Err(); err != nil {
		return Stats{}, fmt.Errorf("proposer: supervise: %w", err)
	}
	p.adam(grad)
	return Stats{Loss: nll / float64(tokens), Entropy: ent / float64(tokens), Tokens: tokens}, nil
}

// Encode returns the token strings the policy emits for proposal pr (its
// card's mechanism, then "name=choice" per parameter in catalogue order),
// or an error wrapping ErrNotInCatalogue. Hosts use it to turn records into
// Supervise examples.
func (p *Policy) Encode(pr records.Proposal) ([]string, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if err := p.ready(); err != nil {
		return nil, fmt.Errorf("proposer: encode: %w", err)
	}
	toks, err := p.lay.encode(Sample{Proposal: pr})
	if err != nil {
		return nil, fmt.Errorf("proposer: encode: %w", err)
	}
	_, out := p.lay.decode(toks)
	return out, nil
}
