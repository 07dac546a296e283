package rwm_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lm2lm/lm2lm/rwm"
)

// benchPrior returns the prior of BenchmarkFitPrior's corpus, fitted
// once per test binary.
var benchPrior = sync.OnceValues(func() (*rwm.Prior, error) {
	var calls atomic.Int64
	return rwm.FitPrior(context.Background(), rwm.DefaultPriorFitConfig(dialsConfig(dials{&calls})), dialsEvidence(30000, 300, 21).Records())
})

// BenchmarkFitPrior fits a prior with the documented defaults (proposal,
// mechanism and effect terms; TuneGrid over 16 blocks of 200 records) on a
// synthetic corpus of 30,000 records over 300 tasks with 30 descriptors
// each (dialsEvidence, the effects configuration of the landscape
// comparison); bytes/file is the size of its file and features its mean's
// coefficients.
func BenchmarkFitPrior(b *testing.B) {
	var calls atomic.Int64
	cfg := dialsConfig(dials{&calls})
	rs := dialsEvidence(30000, 300, 21).Records()
	var p *rwm.Prior
	for b.Loop() {
		var err error
		if p, err = rwm.FitPrior(context.Background(), rwm.DefaultPriorFitConfig(cfg), rs); err != nil {
			b.Fatal(err)
		}
	}
	file, err := p.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(file)), "bytes/file")
	b.ReportMetric(float64(len(p.Coefficients())), "features")
}

// BenchmarkPredictPrior measures a prediction against 200 context records
// of other tasks (dialsEvidence) with and without a prior fitted on
// 30,000 records: "first" factorises the context, "repeated" reuses it.
func BenchmarkPredictPrior(b *testing.B) {
	var calls atomic.Int64
	cfg := dialsConfig(dials{&calls})
	p, err := benchPrior()
	if err != nil {
		b.Fatal(err)
	}
	with, err := p.Config(cfg)
	if err != nil {
		b.Fatal(err)
	}
	without := with // the same kernel hyperparameters, without the mean
	without.Prior = nil
	ev := dialsEvidence(200, 16, 11)
	q := rwm.Query{Task: ev.At(0).Task, Proposal: prop("s3", "factor", "3"), Evidence: ev}
	for _, m := range []struct {
		name string
		cfg  rwm.EmbeddedConfig
	}{{"prior=none", without}, {"prior=30000", with}} {
		b.Run(m.name+"/first", func(b *testing.B) {
			for b.Loop() {
				if _, err := newEmbedded(b, m.cfg).Predict(context.Background(), q); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(m.name+"/repeated", func(b *testing.B) {
			e := newEmbedded(b, m.cfg)
			for b.Loop() {
				if _, err := e.Predict(context.Background(), q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
