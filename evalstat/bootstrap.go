package evalstat

import (
	"math/rand/v2"
	"slices"
	"strings"

	"gonum.org/v1/gonum/stat"
)

// design is the StateLevel layout: per seed (ascending), per stratum
// (ascending), the indices of its cells.
type design [][][]int

func newDesign(cells []Cell) design {
	type key struct {
		seed    uint64
		stratum string
	}
	groups := map[key][]int{}
	var keys []key
	for i, c := range cells {
		k := key{c.Seed, c.Stratum}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], i)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.seed != b.seed {
			if a.seed < b.seed {
				return -1
			}
			return 1
		}
		return strings.Compare(a.stratum, b.stratum)
	})
	var d design
	for i, k := range keys {
		if i == 0 || keys[i-1].seed != k.seed {
			d = append(d, nil)
		}
		d[len(d)-1] = append(d[len(d)-1], groups[k])
	}
	return d
}

// draw appends one replicate's cell indices to buf[:0]: len(d) seeds drawn
// with replacement, then within each drawn seed and stratum as many cells
// as it holds, with replacement.
func (d design) draw(rng *rand.Rand, buf []int) []int {
	buf = buf[:0]
	for range d {
		for _, stratum := range d[rng.IntN(len(d))] {
			for range stratum {
				buf = append(buf, stratum[rng.IntN(len(stratum))])
			}
		}
	}
	return buf
}

// all returns every cell index once, in design order.
func (d design) all() []int {
	var idx []int
	for _, seed := range d {
		for _, stratum := range seed {
			idx = append(idx, stratum...)
		}
	}
	return idx
}

// statistic maps a multiset of cell indices to a number.
type statistic func(idx []int) float64

func meanOf(v []float64) statistic {
	return func(idx []int) float64 {
		s := 0.0
		for _, i := range idx {
			s += v[i]
		}
		return s / float64(len(idx))
	}
}

func iqmOf(v []float64) statistic {
	buf := make([]float64, 0, len(v))
	return func(idx []int) float64 {
		buf = buf[:0]
		for _, i := range idx {
			buf = append(buf, v[i])
		}
		return IQM(buf)
	}
}

// bootstrap returns, for each statistic, its value on all cells and its
// percentile interval over cfg.Resamples replicates of d.
func bootstrap(cfg Config, d resampler, rng *rand.Rand, stats []statistic) []Interval {
	all := d.all()
	reps := make([][]float64, len(stats))
	for k := range stats {
		reps[k] = make([]float64, cfg.Resamples)
	}
	var buf []int
	for r := 0; r < cfg.Resamples; r++ {
		buf = d.draw(rng, buf)
		for k, f := range stats {
			reps[k][r] = f(buf)
		}
	}
	out := make([]Interval, len(stats))
	lo, hi := (1-cfg.Level)/2, (1+cfg.Level)/2
	for k, f := range stats {
		slices.Sort(reps[k])
		out[k] = Interval{
			Point: f(all),
			Low:   stat.Quantile(lo, stat.Empirical, reps[k], nil),
			High:  stat.Quantile(hi, stat.Empirical, reps[k], nil),
		}
	}
	return out
}
