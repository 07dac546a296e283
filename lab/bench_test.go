package lab_test

import (
	"context"
	"testing"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/records"
)

// BenchmarkRun measures one executed proposal ("lr-scale factor=2", a full
// training run and evaluation) on the base-300 task of each family; the
// reference runs are trained before the timer starts. It reports CPU
// seconds per run as measured by the executor.
func BenchmarkRun(b *testing.B) {
	for _, id := range []string{
		"ar-prose/opticks/base-300", "ar-code/go-source/base-300",
		"mdm/opticks/base-300", "centre-masked/opticks/base-300",
	} {
		b.Run(id, func(b *testing.B) {
			l, err := lab.New(lab.DefaultConfig(), records.NewMemStore())
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			task, err := l.Task(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			j, err := l.Build(ctx, task, records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "2"}})
			if err != nil {
				b.Fatal(err)
			}
			var cpu float64
			for i := 0; b.Loop(); i++ {
				j.Seed = uint64(i%3) + 1
				out, err := l.Execute(ctx, j)
				if err != nil {
					b.Fatal(err)
				}
				cpu += out.Cost.DeviceSeconds
			}
			b.ReportMetric(cpu/float64(b.N), "cpu-s/run")
		})
	}
}
