package rwm_test

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// labPrior returns the bytes of the lab's committed prior.
func labPrior(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../lab/prior/v2.prior")
	require.NoError(t, err)
	return b
}

// setCoef returns a prior file b with coefficient i set to v and the
// checksum recomputed as the format does.
func setCoef(t *testing.T, b []byte, i int, v float64) []byte {
	t.Helper()
	return reenvelope(t, b, func(body map[string]any) { body["coef"].([]any)[i] = v })
}

// indexOf returns the index of feature name in p's layout.
func indexOf(t *testing.T, p *rwm.Prior, name string) int {
	t.Helper()
	for i, n := range p.Names() {
		if n == name {
			return i
		}
	}
	t.Fatalf("no feature %q", name)
	return -1
}

// The lab's prior is within the bounds: it reads back byte for byte, and
// its largest coefficient is far below MaxPriorCoefficient.
func TestPriorBoundsLabPriorLoads(t *testing.T) {
	b := labPrior(t)
	p, err := rwm.ReadPrior(b)
	require.NoError(t, err)
	out, err := p.MarshalBinary()
	require.NoError(t, err)
	require.Equal(t, b, out)
	var peak float64
	for _, c := range p.Coefficients() {
		peak = max(peak, math.Abs(c))
	}
	require.Less(t, peak, rwm.MaxPriorCoefficient/100)
}

// A file whose checksum was recomputed over a coefficient beyond
// MaxPriorCoefficient is refused at load, naming the feature; one at the
// bound loads.
func TestPriorBoundsCoefficient(t *testing.T) {
	b := labPrior(t)
	p, err := rwm.ReadPrior(b)
	require.NoError(t, err)
	i := len(p.Coefficients()) / 2
	name := p.Names()[i]
	for _, v := range []float64{1e300, -1e300, 2 * rwm.MaxPriorCoefficient, math.Nextafter(-rwm.MaxPriorCoefficient, math.Inf(-1))} {
		_, err := rwm.ReadPrior(setCoef(t, b, i, v))
		require.ErrorIs(t, err, rwm.ErrPriorCorrupt, "%g", v)
		require.ErrorIs(t, err, rwm.ErrPrior, "%g", v)
		require.Contains(t, err.Error(), name, "%g", v)
		require.Less(t, len(err.Error()), 400)
	}
	for _, v := range []float64{rwm.MaxPriorCoefficient, -rwm.MaxPriorCoefficient} {
		q, err := rwm.ReadPrior(setCoef(t, b, i, v))
		require.NoError(t, err, "%g", v)
		require.Equal(t, v, q.Coefficients()[i])
	}
}

// A prior's mean is clamped to ±MaxPriorMeanSigmas, however large its
// coefficients and the task's descriptors; the unchanged prior's mean is
// not.
func TestPriorBoundsMean(t *testing.T) {
	b := labPrior(t)
	p, err := rwm.ReadPrior(b)
	require.NoError(t, err)
	var mech string
	for _, n := range p.Names() {
		if m, ok := strings.CutPrefix(n, "mechanism|"); ok {
			mech = strings.TrimSuffix(m, "|1")
			break
		}
	}
	require.NotEmpty(t, mech)
	task := records.Task{ID: "t", Split: records.Train, Metric: records.BitsPerByte, SeedNoise: 1,
		Descriptors: map[string]float64{"weight_decay": 0.1}}
	prop := records.Proposal{Mechanism: mech}
	m0 := p.Mean(task, prop, nil, 0)
	require.Less(t, math.Abs(m0), rwm.MaxPriorMeanSigmas)

	one, wd := indexOf(t, p, "mechanism|"+mech+"|1"), indexOf(t, p, "mechanism|"+mech+"|weight_decay")
	for _, sign := range []float64{1, -1} {
		c := reenvelope(t, b, func(body map[string]any) {
			body["coef"].([]any)[one] = sign * rwm.MaxPriorCoefficient
			body["coef"].([]any)[wd] = sign * rwm.MaxPriorCoefficient
		})
		q, err := rwm.ReadPrior(c)
		require.NoError(t, err)
		require.Equal(t, sign*rwm.MaxPriorMeanSigmas, q.Mean(task, prop, nil, 0))
		big := task
		big.Descriptors = map[string]float64{"weight_decay": 1e300}
		require.Equal(t, sign*rwm.MaxPriorMeanSigmas, q.Mean(big, prop, nil, 0))
	}
	// A mechanism the prior has no coefficients for takes the fallback,
	// also clamped.
	other := records.Proposal{Mechanism: "no-such-mechanism"}
	require.Equal(t, 0.5, p.Mean(task, other, nil, 0.5))
	require.Equal(t, rwm.MaxPriorMeanSigmas, p.Mean(task, other, nil, 1e300))
}
