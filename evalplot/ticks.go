package evalplot

import (
	"math"
	"strconv"

	"gonum.org/v1/plot"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// niceTicks places labelled ticks at multiples of 1, 2 or 5 × 10ⁿ, about
// five per axis, with as many decimals as the step needs (so "-7.5, -5,
// -2.5" is "-8, -4, 0" rather than "-7.50"), and an unlabelled tick
// halfway between.
type niceTicks struct{}

// Ticks implements plot.Ticker.
func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || !stat.Finite(lo) || !stat.Finite(hi) {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	step := niceStep((hi - lo) / 5)
	dec := max(0, -int(math.Floor(math.Log10(step)+1e-9)))
	var ticks []plot.Tick
	for k := math.Ceil(lo/step - 1e-9); k*step <= hi+1e-9*step; k++ {
		v := k * step
		if math.Abs(v) < 1e-9*step {
			v = 0
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', dec, 64)})
		if m := v + step/2; m <= hi {
			ticks = append(ticks, plot.Tick{Value: m})
		}
	}
	if m := math.Ceil(lo/step-1e-9)*step - step/2; m >= lo {
		ticks = append(ticks, plot.Tick{Value: m})
	}
	return ticks
}

// niceStep returns the smallest of 1, 2, 5 × 10ⁿ not below raw.
func niceStep(raw float64) float64 {
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, f := range []float64{1, 2, 5, 10} {
		if f*mag >= raw*(1-1e-9) {
			return f * mag
		}
	}
	return 10 * mag
}
