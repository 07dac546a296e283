package calibrate_test

import (
	"fmt"

	"github.com/lm2lm/lm2lm/calibrate"
)

func ExampleTopB() {
	fmt.Println(calibrate.TopB([]float64{0.2, 1.5, -0.3, 0.9}, 2))
	// Output: [1 3]
}

func ExampleFitBinned() {
	wm := []float64{.05, .15, .12, .25, .35, .95} // world-model scores
	real := []float64{.1, .3, .5, .2, .4, .9}     // real scores of the same anchors
	f := calibrate.FitBinned(wm, real, 10)
	fmt.Println(f.X)
	fmt.Printf("%.4f %.4f %.4f\n", f.Apply(0.1), f.Apply(0.5), f.Apply(2))
	// Output:
	// [0.05 0.135 0.25 0.35 0.95]
	// 0.2373 0.5250 0.9000
}

func ExampleWeighter() {
	w := calibrate.NewWeighter(64, 2, 4, 2)
	for _, g := range [][2][]float64{
		{{.1, .5, .9}, {.2, .5, .8}}, // D = 1/9
		{{.1, .5, .9}, {.2, .5, .8}}, // warm: c = (2−1)/D
		{{.9, .5, .1}, {.1, .5, .9}}, // D = 4: the world model got worse
	} {
		w.ObserveGroup(g[0], g[1])
		fmt.Printf("%.3f\n", w.Weight())
	}
	// Output:
	// 1.000
	// 2.000
	// 2.377
}
