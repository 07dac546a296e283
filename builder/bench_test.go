package builder_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/records"
)

// BenchmarkPoolOverhead measures what the pool adds to a job that takes no
// time: semaphore, in-flight map, goroutine and ledger (no store).
func BenchmarkPoolOverhead(b *testing.B) {
	x := buildertest.Func(func(ctx context.Context, j builder.Job) (builder.Outcome, error) {
		return builder.Outcome{Loss: 1, Gain: 0.5}, nil
	})
	cfg := builder.DefaultPoolConfig()
	cfg.Slots = 8
	p, err := builder.NewPool(x, cfg)
	if err != nil {
		b.Fatal(err)
	}
	j := buildertest.Job(buildertest.Spec{})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		j.Seed = uint64(i)
		if _, err := p.Execute(context.Background(), j); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPoolOverheadWithStore adds the idempotency lookup and the
// append to a MemStore.
func BenchmarkPoolOverheadWithStore(b *testing.B) {
	x := buildertest.Func(func(ctx context.Context, j builder.Job) (builder.Outcome, error) {
		return builder.Outcome{Loss: 1, Gain: 0.5}, nil
	})
	cfg := builder.DefaultPoolConfig()
	cfg.Slots = 8
	cfg.Store = records.NewMemStore()
	p, err := builder.NewPool(x, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Execute(context.Background(), buildertest.Job(buildertest.Spec{})); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPoolUtilisation runs 1,000 short jobs (5 ms each) submitted at
// once on an 8-slot pool and reports slot utilisation: slot-seconds held by
// running jobs over 8 × the makespan (goal ≥ 95%). "uniform" jobs take one
// slot each; "mixed" alternates 1- and 2-slot jobs, where the
// semaphore's FIFO order (no starvation of wide jobs) can leave a slot idle
// while a 2-slot job waits at the head of the queue.
func BenchmarkPoolUtilisation(b *testing.B) {
	for _, c := range []struct {
		name     string
		maxSlots int
	}{{"uniform", 1}, {"mixed", 2}} {
		b.Run(c.name, func(b *testing.B) {
			const jobs, slots = 1000, 8
			var util float64
			for b.Loop() {
				x := buildertest.Func(func(ctx context.Context, j builder.Job) (builder.Outcome, error) {
					time.Sleep(5 * time.Millisecond)
					return builder.Outcome{Loss: 1, Gain: 0.5}, nil
				})
				cfg := builder.DefaultPoolConfig()
				cfg.Slots = slots
				p, err := builder.NewPool(x, cfg)
				if err != nil {
					b.Fatal(err)
				}
				ready := make(chan struct{})
				var wg sync.WaitGroup
				for i := range jobs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						j := buildertest.Job(buildertest.Spec{})
						j.Slots = int64(1 + i%c.maxSlots)
						<-ready
						if _, err := p.Execute(context.Background(), j); err != nil {
							b.Error(err)
						}
					}()
				}
				start := time.Now()
				close(ready)
				wg.Wait()
				span := time.Since(start).Seconds()
				util = p.Ledger().Totals().SlotSeconds / (slots * span)
			}
			b.ReportMetric(100*util, "util%")
		})
	}
}
