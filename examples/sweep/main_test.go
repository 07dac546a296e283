package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/labtest"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/cards"
	"github.com/lm2lm/lm2lm/records"
)

func TestList(t *testing.T) {
	var out, log bytes.Buffer
	require.NoError(t, run(context.Background(), &out, &log, options{suite: "v2", suiteSeed: 1, list: true, parallel: 1}))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 100)
	require.True(t, strings.HasPrefix(lines[0], "v2s1/train/ar-prose/00 "))
	out.Reset()
	require.NoError(t, run(context.Background(), &out, &log, options{suite: "v1", list: true, parallel: 1}))
	require.Len(t, strings.Split(strings.TrimSpace(out.String()), "\n"), 24)
	require.Error(t, run(context.Background(), &out, &log, options{suite: "v3", list: true}))
}

// The 95% interval of σ from five seeds (χ², 4 degrees of freedom):
// 0.599–2.874 × the estimate.
func TestSigmaInterval(t *testing.T) {
	lo, hi := sigmaInterval(1, 5)
	require.InDelta(t, 0.5991, lo, 1e-4)
	require.InDelta(t, 2.8736, hi, 1e-4)
	lo, hi = sigmaInterval(0.02, 3)
	require.InDelta(t, 0.02*0.5207, lo, 1e-5)
	require.InDelta(t, 0.02*6.2847, hi, 1e-4)
}

// TestLandscapeTargets runs the whole landscape report (about 1,000 runs,
// several CPU minutes) and checks the landscape's targets as properties of
// the lab. Too long for CI: set LM2LM_LANDSCAPE=1.
func TestLandscapeTargets(t *testing.T) {
	if os.Getenv("LM2LM_LANDSCAPE") != "1" {
		t.Skip("set LM2LM_LANDSCAPE=1 to run the landscape report")
	}
	var out, log bytes.Buffer
	require.NoError(t, run(context.Background(), &out, &log, options{suite: "v2", suiteSeed: 1, landscape: true, parallel: 2}))
	t.Log(log.String())
	got := parseReport(t, out.String())
	require.LessOrEqual(t, got["median pairwise Spearman"], 0.5)
	require.GreaterOrEqual(t, got["cards changing sign"], 30.0)
	require.GreaterOrEqual(t, got["oracle minus best fixed set (Avg@4, σ_e)"], 3.0)
	require.LessOrEqual(t, got["median CPU seconds per run"], 0.5)
}

var reportLine = regexp.MustCompile(`^(.+): (-?[0-9.]+)%?$`)

func parseReport(t *testing.T, s string) map[string]float64 {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	require.Len(t, lines, 4, s)
	out := map[string]float64{}
	for _, l := range lines {
		m := reportLine.FindStringSubmatch(l)
		require.NotNil(t, m, l)
		v, err := strconv.ParseFloat(m[2], 64)
		require.NoError(t, err)
		out[m[1]] = v
	}
	return out
}

func TestParseReport(t *testing.T) {
	got := parseReport(t, "median pairwise Spearman: 0.41\ncards changing sign: 57%\noracle minus best fixed set (Avg@4, σ_e): 3.20\nmedian CPU seconds per run: 0.31\n")
	require.Equal(t, map[string]float64{
		"median pairwise Spearman": 0.41, "cards changing sign": 57,
		"oracle minus best fixed set (Avg@4, σ_e)": 3.2, "median CPU seconds per run": 0.31,
	}, got)
}

func TestPrintLandscapeFourLines(t *testing.T) {
	var out, log bytes.Buffer
	rep := lab.LandscapeReport{Robust: lab.LandscapeStats{MedianSpearman: 0.123, SignChange: 0.5, OracleMinusFixed: 3.456},
		Floor: map[string]float64{"ar-prose": 0.01}}
	printLandscape(&out, &log, rep, 0.314)
	require.Equal(t, "median pairwise Spearman: 0.12\ncards changing sign: 50%\n"+
		"oracle minus best fixed set (Avg@4, σ_e): 3.46\nmedian CPU seconds per run: 0.31\n", out.String())
	require.Contains(t, log.String(), "σ floor ar-prose: 0.0100")
}

func TestWriteCSV(t *testing.T) {
	sw := lab.Sweep{
		Tasks: []records.Task{
			{ID: "a", Family: "ar-prose", Descriptors: map[string]float64{"width": 64, "epochs": 2.5}},
			{ID: "b", Family: "mdm", Descriptors: map[string]float64{"width": 32}},
		},
		Cards: []string{"lr-scale", "width ×½"},
	}
	path := t.TempDir() + "/l.csv"
	require.NoError(t, writeCSV(path, sw, [][]float64{{1.5, math.NaN()}, {-6, 0.25}}))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "task,family,epochs,width,lr-scale,width ×½\n"+
		"a,ar-prose,2.5,64,1.5,\n"+
		"b,mdm,,32,-6,0.25\n", string(got))
}

func TestPrintCards(t *testing.T) {
	var log bytes.Buffer
	stats := []lab.CardStats{{Mean: 1, Above: 2, Below: 1}, {Mean: -4.0 / 3, Below: 1}, {Mean: 2.0 / 3}}
	printCards(&log, []string{"x", "y", "z"}, stats, 2, 3)
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	require.Len(t, lines, 3)
	// Best mean first: x, z, y.
	require.Regexp(t, `^card x +mean +\+1\.00  above \+2 on  2, below −2 on  1 of 3 tasks$`, lines[0])
	require.Regexp(t, `^card z +mean +\+0\.67  above \+2 on  0, below −2 on  0 of 3 tasks$`, lines[1])
	require.Regexp(t, `^card y +mean +-1\.33  above \+2 on  0, below −2 on  1 of 3 tasks$`, lines[2])
	// Names are padded to the longest, so the columns line up.
	log.Reset()
	printCards(&log, []string{"deep-normed add=0 norm=rmsnorm", "width ×½"}, stats[:2], 2, 3)
	lines = strings.Split(strings.TrimSpace(log.String()), "\n")
	require.Equal(t, "card deep-normed add=0 norm=rmsnorm mean  +1.00  above +2 on  2, below −2 on  1 of 3 tasks", lines[0])
	require.Equal(t, "card width ×½                       mean  -1.33  above +2 on  0, below −2 on  1 of 3 tasks", lines[1])
}

// -refs names a task whose reference run diverges and goes on.
func TestRefsLeaveOutDivergedTasks(t *testing.T) {
	good := lab.SuiteV2(1).Train[1]
	hot := labtest.DivergingTwin(good)
	l, err := newLab([]lab.TaskSpec{good, hot}, 2, records.NewMemStore())
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, printRefs(context.Background(), &out, l))
	require.Regexp(t, `(?m)^`+regexp.QuoteMeta(good.ID)+` +train +bits-per-byte`, out.String())
	require.Regexp(t, `(?m)^`+regexp.QuoteMeta(hot.ID)+` +train +left out: lab: reference run failed`, out.String())
}

// With -all the landscape has a column per proposal of the catalogue, each
// on the tasks where it is feasible and changes the reference.
func TestEveryChoiceColumns(t *testing.T) {
	specs := lab.SuiteV2(1).Validation[:3]
	l, err := newLab(specs, 1, records.NewMemStore())
	require.NoError(t, err)
	ids := []string{specs[0].ID, specs[1].ID, specs[2].ID}
	cols := landscapeColumns(l, ids, true)
	n := 0
	for _, c := range lab.Catalogue() {
		n += len(cards.Proposals(c))
	}
	require.Len(t, cols, n)
	byName := map[string]column{}
	for _, c := range cols {
		byName[c.name] = c
	}
	for _, id := range ids {
		spec, _ := l.Spec(id)
		// Halving and doubling the width both change every reference.
		for _, name := range []string{"width factor=2", "width factor=0.5"} {
			p, ok := byName[name].choice[id]
			require.True(t, ok, "%s on %s", name, id)
			cfg, err := lab.ApplyProposal(spec.Config, p)
			require.NoError(t, err)
			require.NotEqual(t, spec.Config.Hidden, cfg.Hidden)
		}
		// A choice equal to the reference's own setting is left out.
		same := "optimizer name=" + spec.Config.Optimizer
		_, ok := byName[same].choice[id]
		require.False(t, ok, "%s is a no-op on %s", same, id)
	}
	rep := landscapeColumns(l, ids, false)
	require.Less(t, len(rep), len(cols))
}
