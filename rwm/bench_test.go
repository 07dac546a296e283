package rwm_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// synthetic returns n real records over 20 tasks in 4 families and 10
// mechanisms with one numeric and one categorical parameter, gains drawn
// from a seeded generator.
func synthetic(n int, seed uint64) records.Evidence {
	rng := rand.New(rand.NewPCG(seed, 1))
	rs := make([]records.Record, n)
	for i := range rs {
		ti := rng.IntN(20)
		tk := records.Task{ID: fmt.Sprintf("t%02d", ti), Family: fmt.Sprintf("f%d", ti%4), Split: records.Train,
			Metric: records.BitsPerByte, RefLoss: 1.5, SeedNoise: 0.004 + 0.001*float64(ti%3)}
		p := records.Proposal{Mechanism: fmt.Sprintf("m%d", rng.IntN(10)), Params: map[string]string{
			"x": fmt.Sprint([]float64{0.25, 0.5, 1, 2, 4}[rng.IntN(5)]), "k": []string{"a", "b", "c"}[rng.IntN(3)]}}
		rs[i] = noisyRecord(rng, tk, p, i)
	}
	return mustEvidence(rs)
}

// noisyRecord is the i-th real record of p on tk, with a gain of about
// 3 σ_e drawn from rng.
func noisyRecord(rng *rand.Rand, tk records.Task, p records.Proposal, i int) records.Record {
	g := rng.NormFloat64() * 3 * tk.SeedNoise
	return records.Record{Task: tk, Proposal: p, Gain: g, Loss: tk.RefLoss - g, Source: records.Real, Seeds: []uint64{uint64(i)}}
}

// mustEvidence is records.NewEvidence for records known to be valid.
func mustEvidence(rs []records.Record) records.Evidence {
	ev, err := records.NewEvidence(rs...)
	if err != nil {
		panic(err)
	}
	return ev
}

// BenchmarkEmbedded measures predictions per second against a context of n
// records: "first" builds and factorises the Gram matrix (O(n³)) for every
// prediction, "repeated" reuses the cached factorisation (O(n²)).
func BenchmarkEmbedded(b *testing.B) {
	benchFirstAndRepeated(b, []int{300, 3000}, "first", "repeated",
		func() rwm.WorldModel { return newEmbedded(b, rwm.DefaultEmbeddedConfig()) })
}

// benchFirstAndRepeated measures a fresh model's first prediction (first)
// and a later one on the same evidence (repeated) against n records each.
func benchFirstAndRepeated(b *testing.B, ns []int, first, repeated string, newModel func() rwm.WorldModel) {
	for _, n := range ns {
		ev := synthetic(n, 7)
		q := rwm.Query{Task: ev.At(0).Task, Proposal: records.Proposal{Mechanism: "m3", Params: map[string]string{"x": "3", "k": "b"}}, Evidence: ev}
		b.Run(fmt.Sprintf("records=%d/%s", n, first), func(b *testing.B) {
			for b.Loop() {
				if _, err := newModel().Predict(context.Background(), q); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "predictions/s")
		})
		b.Run(fmt.Sprintf("records=%d/%s", n, repeated), func(b *testing.B) {
			m := newModel()
			if _, err := m.Predict(context.Background(), q); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := m.Predict(context.Background(), q); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "predictions/s")
		})
	}
}

// BenchmarkCacheHit measures a Cache hit over the embedded model with 300
// records (dominated by hashing the evidence fingerprint).
func BenchmarkCacheHit(b *testing.B) {
	ev := synthetic(300, 7)
	q := rwm.Query{Task: ev.At(0).Task, Proposal: records.Proposal{Mechanism: "m3"}, Evidence: ev}
	c := newCache(b, newEmbedded(b, rwm.DefaultEmbeddedConfig()), rwm.DefaultCacheConfig())
	if _, err := c.Predict(context.Background(), q); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := c.Predict(context.Background(), q); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "predictions/s")
}

// BenchmarkTuned measures Tuned against a context of n records (the
// comparison driver's default profile holds 100 to 200): "tune" is a first
// query, which tunes over the 81 configurations of TuneGrid and then
// factorises the winner; "tuned" is a later query on the same evidence.
func BenchmarkTuned(b *testing.B) {
	benchFirstAndRepeated(b, []int{100, 200}, "tune", "tuned",
		func() rwm.WorldModel { return newTuned(b, rwm.DefaultEmbeddedConfig(), nil) })
}
