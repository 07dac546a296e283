package evalplot_test

import (
	"bytes"
	"fmt"
	"image/png"

	"github.com/lm2lm/lm2lm/evalplot"
	"github.com/lm2lm/lm2lm/evalstat"
)

// Draw two methods' results with their 95% intervals; a program would
// write the buffer to a .png file.
func ExampleMethods() {
	sums := []evalstat.Summary{
		{Method: "Base", AvgK: evalstat.Interval{Point: -4.3, Low: -5.9, High: -2.8}, Threshold: 2},
		{Method: "LM2LM", AvgK: evalstat.Interval{Point: 1.2, Low: -0.4, High: 2.9}, Threshold: 2},
	}
	pairs := []evalstat.Paired{{Method: "LM2LM", Against: "Base", Diff: evalstat.Interval{Point: 5.5, Low: 3.1, High: 7.6}}}
	var buf bytes.Buffer
	if err := evalplot.Methods(&buf, "held-out tasks", 4, sums, pairs); err != nil {
		fmt.Println(err)
		return
	}
	img, _ := png.Decode(&buf)
	fmt.Println(img.Bounds().Dx(), "×", img.Bounds().Dy(), "pixels")
	// Output: 998 × 1030 pixels
}
