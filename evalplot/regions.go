package evalplot

import (
	"fmt"
	"io"
	"math"
	"slices"

	"gonum.org/v1/plot"

	"github.com/lm2lm/lm2lm/evalstat"
)

// Regions draws each region's Avg@K with its confidence interval, one
// panel per region, each beside the paired difference of Avg@K against the
// method that region's pairs compare with (the best baseline there, as
// examples/compare reports it), as a PNG on w. Sums are the per-region
// summaries of evalstat.SummarizeRegions (Region set); regions are drawn
// in order of first appearance, methods in order of first appearance, the
// first on top; pairs are the per-region pairs (Region set), matched by
// Method and Region, and a region without pairs has no second panel. A
// summary or pair without a Region is an error wrapping ErrNoRegion; no
// sums is ErrEmpty. K names the metric (4 for Avg@4).
func Regions(w io.Writer, title string, k int, sums []evalstat.Summary, pairs []evalstat.Paired) error {
	if len(sums) == 0 {
		return ErrEmpty
	}
	var regions, names []string
	for _, s := range sums {
		if s.Region == "" {
			return fmt.Errorf("%w: summary of %q", ErrNoRegion, s.Method)
		}
		if !slices.Contains(regions, s.Region) {
			regions = append(regions, s.Region)
		}
		if !slices.Contains(names, s.Method) {
			names = append(names, s.Method)
		}
	}
	for _, p := range pairs {
		if p.Region == "" {
			return fmt.Errorf("%w: pair %q vs %q", ErrNoRegion, p.Method, p.Against)
		}
	}
	var panels []*plot.Plot
	for _, region := range regions {
		rows := methodRows(names, func(m string) (evalstat.Interval, bool) {
			i := slices.IndexFunc(sums, func(s evalstat.Summary) bool { return s.Method == m && s.Region == region })
			if i < 0 {
				return evalstat.Interval{}, false
			}
			return sums[i].AvgK, true
		})
		p, err := forest(fmt.Sprintf("%s: Avg@%d", region, k), "mean gain per state ("+Sigma+" units)", rows, 0, 1)
		if err != nil {
			return err
		}
		panels = append(panels, p)

		var against []string
		diffs := methodRows(names, func(m string) (evalstat.Interval, bool) {
			i := slices.IndexFunc(pairs, func(p evalstat.Paired) bool { return p.Method == m && p.Region == region })
			if i < 0 {
				return evalstat.Interval{}, false
			}
			if !slices.Contains(against, pairs[i].Against) {
				against = append(against, pairs[i].Against)
			}
			return pairs[i].Diff, true
		})
		if len(against) == 0 {
			panels = append(panels, nil) // a blank tile
			continue
		}
		vs := against[0]
		if len(against) > 1 {
			vs = "the best baseline there"
		}
		p, err = forest(fmt.Sprintf("%s: paired difference vs %s", region, vs),
			fmt.Sprintf("Avg@%d minus %s, same states (%s units)", k, vs, Sigma), diffs, 0, 1)
		if err != nil {
			return err
		}
		panels = append(panels, p)
	}
	return figure(w, title, panels, 2, nil)
}

// methodRows is a forest row per name, in names' order, holding of(name)'s
// interval; a name of() has none for is drawn without a dot.
func methodRows(names []string, of func(name string) (evalstat.Interval, bool)) []row {
	rows := make([]row, len(names))
	for i, m := range names {
		rows[i] = row{m, evalstat.Interval{Point: math.NaN()}}
		if iv, ok := of(m); ok {
			rows[i].iv = iv
		}
	}
	return rows
}
