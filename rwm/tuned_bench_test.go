package rwm_test

import (
	"sync/atomic"
	"testing"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// BenchmarkTunedRecords measures a fresh Tuned's first prediction with
// effects on (dialsConfig: descriptor kernel and WithEffects, tuned over
// the 81 configurations of TuneGrid, then factorised once more) against
// 100 to 10,000 records over 16 tasks with 30 descriptors each; 10,000 is
// past DefaultMaxRecords, so it measures the refusal.
func BenchmarkTunedRecords(b *testing.B) {
	var calls atomic.Int64
	cfg := dialsConfig(dials{&calls})
	benchRecords(b, func(n int) records.Evidence { return dialsEvidence(n, 16, 11) }, prop("s3", "factor", "3"),
		func() rwm.WorldModel { return newTuned(b, cfg, nil) })
}
