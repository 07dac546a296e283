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

// Draw two methods' Avg@4 on two regions, beside their paired difference
// on each region.
func ExampleRegions() {
	iv := func(p float64) evalstat.Interval { return evalstat.Interval{Point: p, Low: p - 1, High: p + 1} }
	sums := []evalstat.Summary{
		{Method: "rerank", Region: "in-distribution", AvgK: iv(0.4)},
		{Method: "LM2LM", Region: "in-distribution", AvgK: iv(0.9)},
		{Method: "rerank", Region: "compute-starved", AvgK: iv(0.2)},
		{Method: "LM2LM", Region: "compute-starved", AvgK: iv(-0.6)},
	}
	pairs := []evalstat.Paired{
		{Method: "LM2LM", Against: "rerank", Region: "in-distribution", Diff: iv(0.5)},
		{Method: "LM2LM", Against: "rerank", Region: "compute-starved", Diff: iv(-0.8)},
	}
	var buf bytes.Buffer
	if err := evalplot.Regions(&buf, "held-out tasks by region", 4, sums, pairs); err != nil {
		fmt.Println(err)
		return
	}
	img, _ := png.Decode(&buf)
	fmt.Println(img.Bounds().Dx(), "×", img.Bounds().Dy(), "pixels")
	// Output: 998 × 704 pixels
}
