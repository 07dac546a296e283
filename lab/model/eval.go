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
	masked := make([]bool, m.maxB*C)
	best, bestP, bestNLL := make([]int, m.maxB), make([]float32, m.maxB), make([]float64, m.maxB)
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
			m.setRows(B, nil)
			m.forward(B, nil)
			for b, st := range chunk {
				var t int
				if cfg.Objective == CentreMasked {
					t = int(val[st+C/2])
				} else {
					t = int(val[st+C])
				}
				total += softmaxNLL(m.k, m.logits[b*V:(b+1)*V], t)
			}
		case MaskedDiffusion:
			for round := 0; round < C; round++ {
				for i, v := range m.sym[:B*C] {
					masked[i] = v == int32(V)
				}
				m.setRows(B, masked)
				m.forward(B, nil)
				// Rows are ordered by position, so the first row of a
				// window with the highest confidence has the lowest index.
				for b := range bestP[:B] {
					best[b], bestP[b] = -1, -1
				}
				for r := 0; r < m.nrows; r++ {
					b, i := int(m.rowB[r]), int(m.rowP[r])
					row := m.logits[r*V : (r+1)*V]
					nll := softmaxNLL(m.k, row, int(val[chunk[b]+i]))
					pmax := row[0]
					for _, p := range row[1:] {
						pmax = max(pmax, p)
					}
					if best[b] < 0 || pmax > bestP[b] || (pmax == bestP[b] && i < best[b]) {
						best[b], bestP[b], bestNLL[b] = i, pmax, nll
					}
				}
				for b, st := range chunk {
					total += bestNLL[b]
					m.sym[b*C+best[b]] = int32(val[st+best[b]])
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
