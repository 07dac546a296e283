package evalplot

import (
	"bytes"
	"image"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/evalstat"
)

// save writes b to $EVALPLOT_DIR/name when the variable is set, so the
// charts can be looked at.
func save(t *testing.T, name string, b []byte) {
	if dir := os.Getenv("EVALPLOT_DIR"); dir != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
}

// decode checks that b is a PNG of the wanted size in inches at DPI whose
// pixels are not all white, and returns it.
func decode(t *testing.T, b []byte, wIn, hIn float64) image.Image {
	img, err := png.Decode(bytes.NewReader(b))
	require.NoError(t, err)
	require.InDelta(t, wIn*DPI, img.Bounds().Dx(), 1)
	require.InDelta(t, hIn*DPI, img.Bounds().Dy(), 1)
	ink := 0
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y += 2 {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x += 2 {
			if r, g, b, _ := img.At(x, y).RGBA(); r+g+b < 3*0xe000 {
				ink++
			}
		}
	}
	require.Greater(t, ink, 500, "the chart is blank")
	return img
}

func sums() ([]evalstat.Summary, []evalstat.Paired) {
	iv := func(p, w float64) evalstat.Interval { return evalstat.Interval{Point: p, Low: p - w, High: p + 0.8*w} }
	s := []evalstat.Summary{
		{Method: "Base", AvgK: iv(-4.3, 1.5), BestK: iv(1.2, 1), NegativeRate: iv(0.58, 0.08), Above: iv(0.16, 0.05), Threshold: 2},
		{Method: "SFT", AvgK: iv(-2.6, 2), BestK: iv(2.1, 1.1), NegativeRate: iv(0.41, 0.07), Above: iv(0.25, 0.06), Threshold: 2},
		{Method: "static world model", AvgK: iv(-11, 4), BestK: iv(3.5, 2), NegativeRate: iv(0.35, 0.1), Above: iv(0.31, 0.08), Threshold: 2},
		{Method: "LM2LM (top-rated calibration)", AvgK: iv(-2, 2.5), BestK: iv(5.2, 2), NegativeRate: iv(0.23, 0.06), Above: iv(0.36, 0.07), Threshold: 2},
	}
	p := []evalstat.Paired{
		{Method: "SFT", Against: "Base", Diff: iv(1.7, 1.5)},
		{Method: "static world model", Against: "Base", Diff: iv(-6.7, 3)},
		{Method: "LM2LM (top-rated calibration)", Against: "Base", Diff: iv(2.3, 1.8)},
		{Method: "LM2LM (top-rated calibration)", Against: "SFT", Diff: iv(0.6, 1.9)},
		{Method: "static world model", Against: "SFT", Diff: iv(-8.4, 3)},
	}
	return s, p
}

func TestMethods(t *testing.T) {
	s, p := sums()
	var buf bytes.Buffer
	require.NoError(t, Methods(&buf, "held-out tasks, 5 seeds", 4, s, p))
	save(t, "methods.png", buf.Bytes())
	decode(t, buf.Bytes(), 2*5.2, 3*3.4+0.45+6.0/72) // 4 metric panels + 2 paired panels, 2 columns
	var again bytes.Buffer
	require.NoError(t, Methods(&again, "held-out tasks, 5 seeds", 4, s, p))
	require.Equal(t, buf.Bytes(), again.Bytes(), "same values, same bytes")
	require.ErrorIs(t, Methods(&buf, "x", 4, nil, nil), ErrEmpty)
}

func trainingRuns() []TrainingRun {
	var runs []TrainingRun
	for mi, m := range []string{"LM2LM", "static world model", "random calibration"} {
		for seed := uint64(1); seed <= 3; seed++ {
			r := rand.New(rand.NewPCG(seed, uint64(mi)))
			run := TrainingRun{Method: m, Seed: seed}
			for step := 1; step <= 96; step++ {
				st := TrainingStep{Step: step, MeanGain: math.NaN(), Reward: math.NaN(), Entropy: 3.4 - 0.02*float64(step)*(1+0.1*float64(mi)) + 0.05*r.NormFloat64(), TopShare: math.NaN()}
				if step%8 == 1 {
					st.MeanGain = -2 + 0.06*float64(step)*(1+float64(mi)) + r.NormFloat64()
					st.Reward = st.MeanGain/2 + 0.3*r.NormFloat64()
					st.TopShare = min(1, 0.1+0.004*float64(step)*(1+2*float64(mi))+0.03*r.Float64())
				}
				run.Steps = append(run.Steps, st)
			}
			runs = append(runs, run)
		}
	}
	return runs
}

func TestTraining(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, Training(&buf, "training curves (mean over 3 seeds, band: lowest to highest seed)", trainingRuns()))
	save(t, "training.png", buf.Bytes())
	decode(t, buf.Bytes(), 2*5.2, 2*3.4+0.45+0.25+6.0/72) // one legend row
	require.ErrorIs(t, Training(&buf, "x", nil), ErrEmpty)
}

// A run that carries its clipped-token share adds a fifth panel (a third
// row); the runs without it draw no line there, and a chart without any
// is the four-panel one.
func TestTrainingClipped(t *testing.T) {
	runs := trainingRuns()
	var four bytes.Buffer
	require.NoError(t, Training(&four, "x", runs))
	for i := range runs[0].Steps {
		runs[0].Steps[i].ClipFrac = 0.01 * float64(i%3)
	}
	var same bytes.Buffer
	require.NoError(t, Training(&same, "x", runs))
	require.Equal(t, four.Bytes(), same.Bytes(), "ClipFrac is read only with Clipped")
	runs[0].Clipped = true
	var five bytes.Buffer
	require.NoError(t, Training(&five, "training curves with the clipped share", runs))
	save(t, "training-clipped.png", five.Bytes())
	decode(t, five.Bytes(), 2*5.2, 3*3.4+0.45+0.25+6.0/72)
	// No run measured the top mechanism's share: four panels again.
	for r := range runs {
		for i := range runs[r].Steps {
			runs[r].Steps[i].TopShare = math.NaN()
		}
	}
	var noTop bytes.Buffer
	require.NoError(t, Training(&noTop, "x", runs))
	decode(t, noTop.Bytes(), 2*5.2, 2*3.4+0.45+0.25+6.0/72)
}

func TestReliability(t *testing.T) {
	var runs []MonitorRun
	for seed := uint64(1); seed <= 3; seed++ {
		s := float64(seed)
		runs = append(runs,
			MonitorRun{Label: "calibrated", Seed: seed, Points: []Monitor{
				{16, 1.2 + 0.1*s, 0.55, 0.62, 1.1}, {40, 0.6, 0.6 + 0.02*s, 0.66, 0.6}, {64, 0.3, 0.68, 0.65 - 0.01*s, 0.2}}},
			MonitorRun{Label: "static", Seed: seed, Points: []Monitor{
				{16, 1.3, 0.5, 0.6, 1.2}, {40, 1.8 + 0.1*s, 0.1, 0.5, 1.7}, {64, 2.1, -0.3 - 0.05*s, 0.38, math.NaN()}}})
	}
	var buf bytes.Buffer
	require.NoError(t, Reliability(&buf, "reliability of the world model's rewards", runs))
	save(t, "reliability.png", buf.Bytes())
	decode(t, buf.Bytes(), 2*5.2, 2*3.4+0.45+0.25+6.0/72) // one legend row
}

func TestCalibration(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	var pts []CalibrationPoint
	for _, step := range []int{16, 40, 64} {
		for _, l := range []string{"LM2LM", "random calibration"} {
			c := CalibrationPoint{Label: l, Seed: 1, Step: step}
			for range 20 {
				x := 3 * r.NormFloat64()
				c.Predicted = append(c.Predicted, x)
				c.Real = append(c.Real, 0.4*x-1+r.NormFloat64()*float64(step)/40)
			}
			pts = append(pts, c)
		}
	}
	var buf bytes.Buffer
	require.NoError(t, Calibration(&buf, "predicted vs real gain of the executed proposals", Sigma+" units", pts))
	save(t, "calibration.png", buf.Bytes())
	decode(t, buf.Bytes(), 3*5.2, 3.4+0.45+0.25+6.0/72)
	pts[0].Real = pts[0].Real[:3]
	require.ErrorContains(t, Calibration(&buf, "x", "u", pts), "20 predicted vs 3 real")
	require.ErrorIs(t, Calibration(&buf, "x", "u", nil), ErrEmpty)
}

func TestLongTitleWidensTheFigure(t *testing.T) {
	pts := []CalibrationPoint{{Label: "LM2LM", Step: 8, Predicted: []float64{1, 2}, Real: []float64{0, 3}}}
	title := "predicted vs real reward of the calibration runs, 2 seeds, profile tiny, a title longer than one panel"
	var buf bytes.Buffer
	require.NoError(t, Calibration(&buf, title, "reward", pts))
	save(t, "one-panel.png", buf.Bytes())
	img, err := png.Decode(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	require.Greater(t, float64(img.Bounds().Dx()), 5.2*DPI+1)
}

func regionSums() ([]evalstat.Summary, []evalstat.Paired) {
	iv := func(p, w float64) evalstat.Interval { return evalstat.Interval{Point: p, Low: p - w, High: p + w} }
	var s []evalstat.Summary
	var p []evalstat.Paired
	for ri, region := range []string{"in-distribution", "compute-starved", "compute-rich"} {
		for mi, m := range []string{"Base", "rerank", "LM2LM"} {
			s = append(s, evalstat.Summary{Method: m, Region: region, AvgK: iv(float64(mi-ri), 0.5+0.2*float64(mi)), Threshold: 2})
			if m == "LM2LM" && region != "compute-rich" {
				p = append(p, evalstat.Paired{Method: m, Against: "rerank", Region: region, Diff: iv(0.3-float64(ri), 0.6)})
			}
		}
	}
	return s, p
}

// Three regions, two of them with pairs: three rows of two tiles (the
// last region's second tile blank), the same bytes again; a summary or a
// pair of no region is refused.
func TestRegions(t *testing.T) {
	s, p := regionSums()
	var buf bytes.Buffer
	require.NoError(t, Regions(&buf, "held-out tasks by region, 3 seeds", 4, s, p))
	save(t, "regions.png", buf.Bytes())
	decode(t, buf.Bytes(), 2*5.2, 3*3.4+0.45+6.0/72)
	var again bytes.Buffer
	require.NoError(t, Regions(&again, "held-out tasks by region, 3 seeds", 4, s, p))
	require.Equal(t, buf.Bytes(), again.Bytes(), "same values, same bytes")

	require.ErrorIs(t, Regions(&buf, "x", 4, nil, nil), ErrEmpty)
	bad := append([]evalstat.Summary(nil), s...)
	bad[4].Region = ""
	err := Regions(&buf, "x", 4, bad, p)
	require.ErrorIs(t, err, ErrNoRegion)
	require.ErrorContains(t, err, `"rerank"`)
	badPairs := append([]evalstat.Paired(nil), p...)
	badPairs[0].Region = ""
	require.ErrorIs(t, Regions(&buf, "x", 4, s, badPairs), ErrNoRegion)
}

// TestMethodPanelsAxes: rate panels span 0–100 % whatever the rates (a
// rate of 0 with an empty interval included: no negative per cent); a
// gain panel spans its intervals and the 0 line with 8% to spare on
// either side.
func TestMethodPanelsAxes(t *testing.T) {
	zero := evalstat.Interval{}
	one := []evalstat.Summary{{Method: "embedded-policy (seed 1)", AvgK: evalstat.Interval{Point: 0.81, Low: 0.81, High: 0.81},
		BestK: evalstat.Interval{Point: 0.81, Low: 0.5, High: 1.2}, NegativeRate: zero, Above: zero, Threshold: 2}}
	s, p := sums()
	for _, tt := range []struct {
		sums  []evalstat.Summary
		pairs []evalstat.Paired
		gains [][2]float64 // Avg@K's and Best@K's span with 0
	}{
		{one, nil, [][2]float64{{0, 0.81}, {0, 1.2}}},
		{s, p, [][2]float64{{-15, 0}, {0, 6.8}}}, // sums(): lowest Avg@K −11 − 4, highest Best@K 5.2 + 0.8·2
	} {
		panels, err := methodPanels(2, tt.sums, tt.pairs)
		require.NoError(t, err)
		require.Len(t, panels, 4+len(againstOrder(tt.pairs)))
		for i, g := range tt.gains {
			pad := 0.08 * (g[1] - g[0])
			require.InDelta(t, g[0]-pad, panels[i].X.Min, 1e-9, "panel %d", i)
			require.InDelta(t, g[1]+pad, panels[i].X.Max, 1e-9, "panel %d", i)
		}
		for _, rp := range panels[2:4] {
			require.Equal(t, [2]float64{0, 100}, [2]float64{rp.X.Min, rp.X.Max}, rp.Title.Text)
			for _, tk := range rp.X.Tick.Marker.Ticks(rp.X.Min, rp.X.Max) {
				require.GreaterOrEqual(t, tk.Value, 0.0)
				if tk.Label != "" {
					require.NotContains(t, tk.Label, "-")
				}
			}
		}
	}
}
