package rwm_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// dials is an Effector for benchmarks and tests, shaped like a lab's: it
// copies the task's descriptors into a new map and changes a few of them.
// Mechanism "s<i>" multiplies descriptor "d<i>" by its "factor" and adds
// log10 of it to "d<i+10>"; "o<i>" sets the one-hot group "h0".."h4" to
// h<i>; anything else cannot be built. Calls counts the calls.
type dials struct{ calls *atomic.Int64 }

func (dials) ID() string { return "dials" }

func (d dials) Effect(t records.Task, p records.Proposal) (map[string]float64, error) {
	d.calls.Add(1)
	out := make(map[string]float64, len(t.Descriptors))
	for k, v := range t.Descriptors {
		out[k] = v
	}
	if len(p.Mechanism) != 2 {
		return nil, errors.New("dials: cannot build")
	}
	i := int(p.Mechanism[1] - '0')
	switch p.Mechanism[0] {
	case 's':
		f, err := strconv.ParseFloat(p.Params["factor"], 64)
		if err != nil || f <= 0 {
			return nil, fmt.Errorf("dials: factor %q", p.Params["factor"])
		}
		out[fmt.Sprintf("d%02d", i)] *= f
		out[fmt.Sprintf("d%02d", i+10)] += f
	case 'o':
		for j := range 5 {
			out[fmt.Sprintf("h%d", j)] = 0
		}
		out[fmt.Sprintf("h%d", i%5)] = 1
	default:
		return nil, errors.New("dials: cannot build")
	}
	return out, nil
}

// dialsEvidence returns n real records over nt tasks of 4 families, each
// task with 25 numeric descriptors d00..d24 and a one-hot group h0..h4,
// and proposals of 10 mechanisms (s0..s6 with a factor, o0..o2; one in 20
// is "x", which dials cannot build), gains drawn from a seeded generator.
func dialsEvidence(n, nt int, seed uint64) records.Evidence {
	rng := rand.New(rand.NewPCG(seed, 2))
	tasks := make([]records.Task, nt)
	for i := range tasks {
		d := map[string]float64{}
		for j := range 25 {
			d[fmt.Sprintf("d%02d", j)] = rng.NormFloat64() * float64(1+j%4*100)
		}
		for j := range 5 {
			d[fmt.Sprintf("h%d", j)] = 0
		}
		d[fmt.Sprintf("h%d", rng.IntN(5))] = 1
		tasks[i] = records.Task{ID: fmt.Sprintf("t%02d", i), Family: fmt.Sprintf("f%d", i%4), Split: records.Train,
			Metric: records.BitsPerByte, RefLoss: 1.5, SeedNoise: 0.004 + 0.001*float64(i%3), Descriptors: d}
	}
	rs := make([]records.Record, n)
	for i := range rs {
		tk := tasks[rng.IntN(nt)]
		var p records.Proposal
		switch m := rng.IntN(20); {
		case m < 12:
			p = prop(fmt.Sprintf("s%d", m%7), "factor", fmt.Sprint([]float64{0.25, 0.5, 2, 4}[rng.IntN(4)]))
		case m < 19:
			p = prop(fmt.Sprintf("o%d", m%3), "k", []string{"a", "b"}[rng.IntN(2)])
		default:
			p = prop("x", "factor", "2")
		}
		rs[i] = noisyRecord(rng, tk, p, i)
	}
	return mustEvidence(rs)
}

// dialsConfig is the "effects, tuned" base of the landscape comparison:
// descriptor kernel at weight 1 and WithEffects.
func dialsConfig(eff rwm.Effector) rwm.EmbeddedConfig {
	c := rwm.DefaultEmbeddedConfig()
	c.DescriptorWeight = 1
	return rwm.WithEffects(c, eff)
}

// BenchmarkTunedEffects measures a fresh Tuned's first prediction with
// effects on (tuning over the 81 configurations of TuneGrid, then
// predicting) against 200 records over 16 tasks with 30 descriptors each;
// effects/op counts the Effector's calls.
func BenchmarkTunedEffects(b *testing.B) {
	ev := dialsEvidence(200, 16, 11)
	q := rwm.Query{Task: ev.At(0).Task, Proposal: prop("s3", "factor", "3"), Evidence: ev}
	var calls atomic.Int64
	cfg := dialsConfig(dials{&calls})
	for b.Loop() {
		if _, err := newTuned(b, cfg, nil).Predict(context.Background(), q); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(calls.Load())/float64(b.N), "effects/op")
}
