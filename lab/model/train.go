package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm/lab/model/kernel"
)

// Data is a folded corpus split: every symbol is already < Config.Vocab.
type Data struct{ Train, Val []byte }

// Result is what one training run measured.
type Result struct {
	// Loss is the validation loss in the metric's units (METHOD.md §1
	// Vocabulary): bits per folded byte for Autoregressive (the mean NLL per
	// symbol of the folded alphabet over EvalWindows deterministic
	// validation windows, in bits), nats per masked token for
	// MaskedDiffusion (along the greedy unmasking order) and CentreMasked.
	// NaN when the run diverged before evaluation.
	Loss float64
	// Diverged is true when training produced a non-finite loss or a loss
	// above twice the uniform model's; Reason says which and when.
	Diverged bool
	Reason   string
	// StepsRun is the number of optimiser steps taken.
	StepsRun int
	// FLOPs counts the matrix-multiply floating-point operations (2·m·k·n
	// each) of training and evaluation; element-wise work is not counted.
	FLOPs float64
	// TrainLoss is a sparse training curve in the metric's units: the mean
	// training NLL (without label smoothing) over consecutive blocks of
	// max(1, Steps/100) steps.
	TrainLoss []float64
}

// evalBatch is how many validation windows are evaluated per forward pass;
// library choice (fits the activations of the default model in L2).
const evalBatch = 256

// ctxEvery is how often (in steps) Train checks its context: every step,
// so a cancelled or timed-out run stops within one step (at most
// MaxStepFLOPs of work).
const ctxEvery = 1

// Train trains cfg on d.Train from seed and evaluates it on d.Val (see
// Result.Loss for the metric). The same (cfg, d, seed) gives the same Result
// bit for bit with the same kernel backend; backends agree to about 1e-4 on
// stable recipes (see the package doc).
// Initialisation, batch positions, mask draws and dropout use separate
// random streams derived from seed, so two configurations trained from the
// same seed see the same batches (common random numbers).
//
// A diverged run returns Result{Diverged: true} and a nil error. Errors wrap
// ErrInvalidConfig, ErrInvalidData, or ctx.Err() when ctx is done (checked
// every step and between evaluation batches). Train starts no goroutines
// and is safe to call concurrently.
func Train(ctx context.Context, cfg Config, d Data, seed uint64) (Result, error) {
	return train(ctx, cfg, d, seed, kernel.New())
}

// train is Train on kernel k.
func train(ctx context.Context, cfg Config, d Data, seed uint64, k *kernel.Kernel) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if err := checkData(cfg, d); err != nil {
		return Result{}, err
	}
	maxB := max(cfg.Batch, min(evalBatch, cfg.EvalWindows))
	m := newNet(cfg, k, maxB, rand.New(rand.NewPCG(seed, 1)))
	opt := newOptimizer(cfg, m.tensors, len(m.params), k)
	dataRng := rand.New(rand.NewPCG(seed, 2))
	dropRng := rand.New(rand.NewPCG(seed, 3))
	maskRng := rand.New(rand.NewPCG(seed, 4))
	if cfg.Dropout == 0 {
		dropRng = nil
	}

	unit := 1.0 // nats → metric units
	if cfg.Objective == Autoregressive {
		unit = 1 / math.Ln2
	}
	uniform := math.Log(float64(cfg.Vocab)) // nats
	B := cfg.Batch
	P := cfg.outPositions()
	target := make([]int32, maxB*P)
	include := make([]bool, maxB*P)
	curve := lossCurve{every: max(1, cfg.Steps/100), steps: cfg.Steps, unit: unit, uniform: uniform}
	var res Result
	for s := 0; s < cfg.Steps; s++ {
		if s%ctxEvery == 0 {
			if err := ctx.Err(); err != nil {
				res.StepsRun, res.FLOPs = s, k.FLOPs()
				return res, fmt.Errorf("model: train step %d: %w", s, err)
			}
		}
		fillBatch(cfg, d.Train, m.sym, target, include, B, dataRng, maskRng)
		m.setRows(B, include)
		m.forward(B, dropRng)
		nll, ok := m.loss(target, cfg.LabelSmoothing)
		clear(m.grads)
		m.backward(B)
		clipGrads(m.grads, cfg.ClipNorm)
		opt.step(m.params, m.grads, lrAt(cfg, s))
		res.StepsRun = s + 1
		if math.IsNaN(nll) || math.IsInf(nll, 0) {
			res.Diverged, res.Loss, res.FLOPs = true, math.NaN(), k.FLOPs()
			res.Reason = fmt.Sprintf("non-finite training loss at step %d", s)
			return res, nil
		}
		if reason := curve.add(&res, s, nll, ok); reason != "" {
			res.Diverged, res.Loss, res.FLOPs = true, math.NaN(), k.FLOPs()
			res.Reason = reason
			return res, nil
		}
	}
	loss, err := m.evaluate(ctx, d.Val)
	res.FLOPs = k.FLOPs()
	if err != nil {
		return res, err
	}
	curve.judgeValidation(&res, loss)
	return res, nil
}

// lossCurve keeps a run's training curve: the mean training loss of each
// block of every steps (the last block may be shorter), in metric units
// (nats times unit), and judges divergence against the uniform model's
// loss (uniform, in nats).
type lossCurve struct {
	every, steps  int
	unit, uniform float64
	sum           float64 // the block's losses so far
	n             int     // and their number
}

// add adds step s's training loss nll (ok false: the step had none). At
// the end of a block it appends the block's mean to res.TrainLoss and,
// past the first tenth of the run, says why the run diverged when the
// mean exceeds twice the uniform model's loss ("" when it does not).
func (c *lossCurve) add(res *Result, s int, nll float64, ok bool) string {
	if ok {
		c.sum += nll
		c.n++
	}
	if (s+1)%c.every != 0 && s+1 != c.steps {
		return ""
	}
	sum, n := c.sum, c.n
	c.sum, c.n = 0, 0
	if n == 0 {
		return ""
	}
	mean := sum / float64(n)
	res.TrainLoss = append(res.TrainLoss, mean*c.unit)
	if s+1 >= c.steps/10 && mean > 2*c.uniform {
		return fmt.Sprintf("training loss %.4g exceeded twice the uniform model's %.4g at step %d",
			mean*c.unit, c.uniform*c.unit, s)
	}
	return ""
}

// judgeValidation sets res.Loss from the validation loss (in nats) and
// marks the run diverged when that loss is not finite or exceeds twice
// the uniform model's.
func (c *lossCurve) judgeValidation(res *Result, loss float64) {
	res.Loss = loss * c.unit
	switch {
	case math.IsNaN(loss) || math.IsInf(loss, 0):
		res.Diverged, res.Reason = true, "non-finite validation loss"
	case loss > 2*c.uniform:
		res.Diverged = true
		res.Reason = fmt.Sprintf("validation loss %.4g exceeded twice the uniform model's %.4g", loss*c.unit, c.uniform*c.unit)
	}
}

// minLen is the shortest split that holds one window.
func minLen(cfg Config) int {
	if cfg.Objective == Autoregressive {
		return cfg.Context + 1
	}
	return cfg.Context
}

func checkData(cfg Config, d Data) error {
	n := minLen(cfg)
	for _, s := range []struct {
		name string
		b    []byte
	}{{"Train", d.Train}, {"Val", d.Val}} {
		if len(s.b) < n {
			return fmt.Errorf("%w: %s has %d symbols, want at least %d", ErrInvalidData, s.name, len(s.b), n)
		}
		for i, v := range s.b {
			if int(v) >= cfg.Vocab {
				return fmt.Errorf("%w: %s[%d] = %d, want < Vocab = %d", ErrInvalidData, s.name, i, v, cfg.Vocab)
			}
		}
	}
	return nil
}

// fillBatch draws B training windows: inputs into sym (B×Context), targets
// and which output rows count into target/include (B×outPositions).
func fillBatch(cfg Config, text []byte, sym, target []int32, include []bool, B int, dataRng, maskRng *rand.Rand) {
	C, mask := cfg.Context, int32(cfg.Vocab)
	starts := len(text) - minLen(cfg) + 1
	for b := 0; b < B; b++ {
		st := dataRng.IntN(starts)
		w := text[st : st+C]
		in := sym[b*C : (b+1)*C]
		for i, v := range w {
			in[i] = int32(v)
		}
		switch cfg.Objective {
		case Autoregressive:
			target[b], include[b] = int32(text[st+C]), true
		case CentreMasked:
			c := C / 2
			target[b], include[b] = in[c], true
			in[c] = mask
		case MaskedDiffusion:
			// METHOD.md §1 Vocabulary (diffusion families): mask rate
			// t ~ U(0,1], each position masked with probability t.
			t := 1 - maskRng.Float64()
			for i := range in {
				r := b*C + i
				target[r] = in[i]
				include[r] = maskRng.Float64() < t
				if include[r] {
					in[i] = mask
				}
			}
		}
	}
}

// loss turns the output rows' logits into softmax probabilities, returns
// the mean NLL (nats, without smoothing) over the rows (target[b·P+p] is
// row (b,p)'s symbol), and writes into m.dlog the gradient of the mean
// label-smoothed cross-entropy −Σ q·log p with q = (1−ε)·onehot + ε/V.
// ok is false when there are no rows (nothing to learn from this batch).
func (m *net) loss(target []int32, eps float64) (nll float64, ok bool) {
	V, rows := m.cfg.Vocab, m.nrows
	if rows == 0 {
		return 0, false
	}
	inv := float32(1 / float64(rows))
	off := float32(eps / float64(V))
	on := float32(1-eps) + off
	for r := 0; r < rows; r++ {
		d := m.dlog[r*V : (r+1)*V]
		p := m.logits[r*V : (r+1)*V]
		t := int(target[int(m.rowB[r])*m.P+int(m.rowP[r])])
		nll += softmaxNLL(m.k, p, t)
		for i := range d {
			d[i] = (p[i] - off) * inv
		}
		d[t] = (p[t] - on) * inv
	}
	return nll / float64(rows), true
}

// softmaxNLL replaces the logits row z by its softmax probabilities and
// returns −log p_t in nats (computed from the logits, in float64).
func softmaxNLL(k *kernel.Kernel, z []float32, t int) float64 {
	mx := z[0]
	for _, v := range z[1:] {
		mx = max(mx, v)
	}
	zt := float64(z[t] - mx)
	sum := k.ExpShift(z, mx)
	inv := float32(1 / sum)
	for i := range z {
		z[i] *= inv
	}
	return math.Log(sum) - zt
}
