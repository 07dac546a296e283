package model

import (
	"context"
	"fmt"
)

// evalStarts returns the n deterministic, evenly spaced window starts over
// a split of length L (windows may overlap when n is large).
func evalStarts(cfg Config, L, n int) []int {
	avail := L - minLen(cfg) + 1
	st := make([]int, n)
	for i := range st {
		st[i] = int(int64(i) * int64(avail) / int64(n))
	}
	return st
}

// evaluate returns the validation loss in nats on cfg.EvalWindows windows
// of val: the mean next-symbol NLL (Autoregressive), the centre NLL
// (CentreMasked), or the NLL along the greedy unmasking order
// (MaskedDiffusion, METHOD.md §1 Vocabulary): every window starts fully
// masked; at each of Context rounds the model predicts all masked positions,
// the position whose most likely symbol is most probable (lowest index on
// ties) is scored with the true symbol's NLL and then revealed. The mask
// pattern depends only on the model, never on the seed's random streams.
func (m *net) evaluate(ctx context.Context, val []byte) (float64, error) {
	cfg := m.cfg
	C, V := cfg.Context, cfg.Vocab
	starts := evalStarts(cfg, len(val), cfg.EvalWindows)
	var total float64
	for lo := 0; lo < len(starts); lo += m.maxB {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("model: evaluate: %w", err)
		}
		chunk := starts[lo:min(lo+m.maxB, len(starts))]
		B := len(chunk)
		for b, st := range chunk {
			in := m.sym[b*C : (b+1)*C]
			for i := range in {
				in[i] = int32(val[st+i])
			}
			if cfg.Objective == CentreMasked {
				in[C/2] = int32(V)
			}
			if cfg.Objective == MaskedDiffusion {
				for i := range in {
					in[i] = int32(V)
				}
			}
		}
		switch cfg.Objective {
		case Autoregressive, CentreMasked:
			m.forward(B, nil)
			for b, st := range chunk {
				t := int(val[st+C])
				if cfg.Objective == CentreMasked {
					t = int(val[st+C/2])
				}
				total += softmaxNLL(m.k, m.logits[b*V:(b+1)*V], t)
			}
		case MaskedDiffusion:
			for round := 0; round < C; round++ {
				m.forward(B, nil)
				for b, st := range chunk {
					best, bestP, bestNLL := -1, float32(-1), 0.0
					for i := 0; i < C; i++ {
						if m.sym[b*C+i] != int32(V) {
							continue
						}
						row := m.logits[(b*C+i)*V : (b*C+i+1)*V]
						nll := softmaxNLL(m.k, row, int(val[st+i]))
						pmax := row[0]
						for _, p := range row[1:] {
							pmax = max(pmax, p)
						}
						if best < 0 || pmax > bestP {
							best, bestP, bestNLL = i, pmax, nll
						}
					}
					total += bestNLL
					m.sym[b*C+best] = int32(val[st+best])
				}
			}
		}
	}
	n := float64(len(starts))
	if cfg.Objective == MaskedDiffusion {
		n *= float64(C)
	}
	return total / n, nil
}
