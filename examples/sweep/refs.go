package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/lm2lm/lm2lm/lab"
)

// sigmaInterval returns the 95% interval of the true seed noise given the
// sample standard deviation s of n runs: s·√((n−1)/χ²_{0.975}) to
// s·√((n−1)/χ²_{0.025}) with n−1 degrees of freedom (normal losses).
func sigmaInterval(s float64, n int) (lo, hi float64) {
	k := float64(n - 1)
	c := distuv.ChiSquared{K: k}
	return s * math.Sqrt(k/c.Quantile(0.975)), s * math.Sqrt(k/c.Quantile(0.025))
}

// printRefs prints every task's b_e, σ_e with its 95% interval, and the
// mean CPU and wall seconds of its reference runs, then per family.
func printRefs(ctx context.Context, w io.Writer, l *lab.Lab) error {
	fmt.Fprintf(w, "%-28s %-9s %-15s %8s %8s %17s %7s %7s\n", "task", "split", "metric", "b_e", "σ_e", "σ_e 95% interval", "CPU s", "wall s")
	type acc struct{ cpu, wall, n float64 }
	fam := map[string]*acc{}
	var order []string
	for _, s := range l.Specs() {
		ref, err := l.Reference(ctx, s.ID)
		if errors.Is(err, lab.ErrReference) {
			fmt.Fprintf(w, "%-28s %-9s left out: %v\n", s.ID, s.Split, err)
			continue
		}
		if err != nil {
			return err
		}
		var cpu, wall float64
		for _, r := range ref.Runs {
			cpu += r.Cost.DeviceSeconds
			wall += r.Cost.WallSeconds
		}
		n := float64(len(ref.Runs))
		t := ref.Task
		lo, hi := sigmaInterval(t.SeedNoise, len(ref.Runs))
		fmt.Fprintf(w, "%-28s %-9s %-15s %8.4f %8.4f  [%.4f, %.4f] %7.2f %7.2f\n", t.ID, t.Split, t.Metric, t.RefLoss, t.SeedNoise, lo, hi, cpu/n, wall/n)
		a := fam[s.Family]
		if a == nil {
			a = &acc{}
			fam[s.Family] = a
			order = append(order, s.Family)
		}
		a.cpu, a.wall, a.n = a.cpu+cpu, a.wall+wall, a.n+n
	}
	fmt.Fprintln(w)
	for _, f := range order {
		a := fam[f]
		fmt.Fprintf(w, "family %-14s %.2f CPU s, %.2f wall s per reference run (%d runs)\n", f, a.cpu/a.n, a.wall/a.n, int(a.n))
	}
	lo, hi := sigmaInterval(1, len(l.Config().RefSeeds))
	fmt.Fprintf(w, "σ_e from %d seeds: the true σ lies within %.2f–%.2f × σ_e (95%%, χ² with %d degrees of freedom)\n",
		len(l.Config().RefSeeds), lo, hi, len(l.Config().RefSeeds)-1)
	return nil
}
