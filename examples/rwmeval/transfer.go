package main

// Ranking on unseen tasks: the world model's context holds records of other
// tasks only (a random part of a source landscape, as M₀ holds random
// records of the training tasks, METHOD.md §1 On-policy calibration), plus
// at most a few records of the target task itself (its history, as a state
// of an unseen task has one, METHOD.md §1 Data and evaluation), and it
// ranks every other proposal of the target task. This is the judgement the
// world model gives at test time and on the policy's states of a held-out
// task; the same-landscape ranking (landscape.go) mixes in records of the
// very cells it ranks. Pure, as landscape.go.

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm/records"
)

// transferDraw is one repetition's draw: the source context order and
// seeds, and the target's seeds and history order.
type transferDraw struct {
	src, dst landDraw
	z        []float64 // a standard normal per target cell: the noisy oracles' noise
}

// rankTransfer scores the models and the baselines on cfg.reps draws. In
// each draw and context size n (cfg.sizes, in source cells, each ≤ the
// source's cells), the evidence of a target task is the context seed's
// record of the first n source cells of the draw plus the context seed's
// record of the first hist cells of that task in the draw's target order;
// the task's other cells are predicted and scored against their other
// seed, as rankLandscape scores (pairAccuracy, topMean; the oracle row
// predicts by the context seed of the target cells). After the oracle come
// one noisy oracle per entry s of noise (in σ_e units, each > 0): the
// oracle's prediction plus s·z with z a standard normal per cell and draw,
// the same z for every s and size, so that the rows chart how much ranking
// a given prediction error leaves (a world model is worth what the noisy
// oracle of its pairwise accuracy is). Then the models. A task with at
// most hist cells is skipped.
func rankTransfer(ctx context.Context, dst, src *landscape, models []rankModel, cfg rankConfig, hist int, noise []float64) ([]rankRow, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if hist < 0 {
		return nil, fmt.Errorf("history of %d cells: want ≥ 0", hist)
	}
	for _, n := range cfg.sizes {
		if n < 0 || n > len(src.cells) {
			return nil, fmt.Errorf("context of %d source cells out of %d: want 0 ≤ n ≤ %d", n, len(src.cells), len(src.cells))
		}
	}
	for _, sd := range noise {
		if !(sd > 0) || math.IsInf(sd, 1) {
			return nil, fmt.Errorf("oracle noise %g σ_e: want a finite value > 0", sd)
		}
	}
	if shared := sharedTasks(dst, src); shared != "" {
		return nil, fmt.Errorf("task %s is in both landscapes: the context must hold other tasks only", shared)
	}
	return rankRows(cfg, rowNames(noise, models), len(dst.tasks), func(rep int) func(n int, add scoreFunc) error {
		drng := rand.New(rand.NewPCG(cfg.seed^0x7a5f, uint64(rep)))
		d := transferDraw{
			src: src.draw(rand.New(rand.NewPCG(cfg.seed, uint64(rep)))),
			dst: dst.draw(drng),
			z:   make([]float64, len(dst.cells)),
		}
		for i := range d.z {
			d.z[i] = drng.NormFloat64()
		}
		return func(n int, add scoreFunc) error {
			return scoreTransfer(ctx, dst, src, d, n, hist, cfg.k, noise, models, add)
		}
	})
}

// sharedTasks returns a task ID of both landscapes, "" when none.
func sharedTasks(a, b *landscape) string {
	in := map[string]bool{}
	for _, id := range b.ids {
		in[id] = true
	}
	for _, id := range a.ids {
		if in[id] {
			return id
		}
	}
	return ""
}

// historyOf returns, per target task, its first hist cells in d's order.
func historyOf(dst *landscape, d landDraw, hist int) [][]int {
	task := make([]int, len(dst.cells))
	for ti, idx := range dst.tasks {
		for _, i := range idx {
			task[i] = ti
		}
	}
	out := make([][]int, len(dst.tasks))
	for _, i := range d.order {
		if ti := task[i]; len(out[ti]) < hist {
			out[ti] = append(out[ti], i)
		}
	}
	return out
}

// scoreTransfer scores one context size of one draw (see rankTransfer),
// calling add for each ranked task as scoreTask does.
func scoreTransfer(ctx context.Context, dst, src *landscape, d transferDraw, n, hist, k int, noise []float64, models []rankModel, add scoreFunc) error {
	base := make([]records.Record, 0, n+hist)
	for _, i := range d.src.order[:n] {
		base = append(base, src.cells[i].seeds[d.src.seed[i]])
	}
	histories := historyOf(dst, d.dst, hist)
	inHist := make([]bool, len(dst.cells))
	for _, h := range histories {
		for _, i := range h {
			inHist[i] = true
		}
	}
	for ti, idx := range dst.tasks {
		if len(idx) <= hist {
			continue
		}
		rs := append([]records.Record(nil), base...)
		for _, i := range histories[ti] {
			rs = append(rs, dst.cells[i].seeds[d.dst.seed[i]])
		}
		ev, err := records.NewEvidence(rs...)
		if err != nil {
			return fmt.Errorf("evidence of task %s: %w", dst.ids[ti], err)
		}
		held, seen, truth := dst.heldOut(idx, inHist, d.dst.seed)
		if err := dst.scoreTask(ctx, ti, held, seen, truth, ev, k, noise, d.z, models, add); err != nil {
			return err
		}
	}
	return nil
}
