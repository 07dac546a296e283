package rwm_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// recordCounts are the context sizes of BenchmarkEmbeddedRecords and
// BenchmarkTunedRecords; run the large ones with -benchtime=1x.
var recordCounts = []int{100, 300, 1000, 3000, 10000}

// benchRecords measures a fresh model's first prediction against contexts
// of recordCounts records from evidence(n); a context beyond the model's
// bound (rwm.DefaultMaxRecords) measures the refusal, which must wrap
// rwm.ErrTooManyRecords.
func benchRecords(b *testing.B, evidence func(n int) records.Evidence, p records.Proposal, newModel func() rwm.WorldModel) {
	for _, n := range recordCounts {
		ev := evidence(n)
		q := rwm.Query{Task: ev.At(0).Task, Proposal: p, Evidence: ev}
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			for b.Loop() {
				_, err := newModel().Predict(context.Background(), q)
				switch {
				case n > rwm.DefaultMaxRecords && !errors.Is(err, rwm.ErrTooManyRecords):
					b.Fatalf("%d records: got %v, want ErrTooManyRecords", n, err)
				case n <= rwm.DefaultMaxRecords && err != nil:
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEmbeddedRecords measures the embedded model's first prediction
// (building and factorising the Gram matrix) against 100 to 10,000
// records over 20 tasks and 10 mechanisms; 10,000 is past
// DefaultMaxRecords, so it measures the refusal.
func BenchmarkEmbeddedRecords(b *testing.B) {
	benchRecords(b, func(n int) records.Evidence { return synthetic(n, 7) },
		records.Proposal{Mechanism: "m3", Params: map[string]string{"x": "3", "k": "b"}},
		func() rwm.WorldModel { return newEmbedded(b, rwm.DefaultEmbeddedConfig()) })
}
