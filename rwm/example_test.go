package rwm_test

import (
	"context"
	"fmt"

	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

func ExampleLedger() {
	// The usual stack: Ledger → Cache → Limit → Retry → backend.
	backend, err := rwm.NewEmbedded(rwm.DefaultEmbeddedConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	retry, err := rwm.NewRetry(backend, rwm.DefaultRetryConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	limit, err := rwm.NewLimit(retry, 4)
	if err != nil {
		fmt.Println(err)
		return
	}
	cache, err := rwm.NewCache(limit, rwm.DefaultCacheConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	wm := rwm.NewLedger(cache)

	q := rwm.Query{Task: rwmtest.Task(0), Proposal: rwmtest.Proposals()[0], Evidence: rwmtest.Evidence(20)}
	for range 3 {
		if _, err := wm.Predict(context.Background(), q); err != nil {
			fmt.Println(err)
		}
	}
	fmt.Printf("%+v\n", wm.Stats())
	fmt.Printf("%+v\n", cache.Stats())
	// Output:
	// {Calls:3 Errors:0 CacheHits:2 BackendCalls:1 PromptTokens:0 CompletionTokens:0}
	// {Hits:2 Coalesced:0 Misses:1 Evictions:0 Len:1}
}

func ExampleTuned() {
	// A world model whose hyperparameters follow its records (METHOD.md §1
	// Research World Model): tuned by marginal likelihood once per evidence.
	wm, err := rwm.NewTuned(rwm.DefaultEmbeddedConfig(), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for _, n := range []int{12, 12, 40} { // a calibration point adds 28 records
		ev := rwmtest.Evidence(n)
		for _, p := range rwmtest.Proposals() {
			if _, err := wm.Predict(ctx, rwm.Query{Task: rwmtest.Task(0), Proposal: p, Evidence: ev}); err != nil {
				fmt.Println(err)
			}
		}
		cfg, lm, err := wm.Config(ctx, ev)
		if err != nil {
			fmt.Println(err)
		}
		fmt.Printf("%d records: noise %.2g σ_e, task correlations %.2g/%.2g/%.2g, mechanism %.2g, lengthscale %.3g, log marginal %.2f\n",
			n, cfg.NoiseSigmas, cfg.CorrFamily, cfg.CorrMetric, cfg.CorrAny, cfg.CorrMech, cfg.Lengthscale, lm)
	}
	fmt.Printf("%+v\n", wm.Stats())
	// Output:
	// 12 records: noise 1 σ_e, task correlations 0.5/0.25/0.1, mechanism 0.9, lengthscale 2.77, log marginal -24.26
	// 12 records: noise 1 σ_e, task correlations 0.5/0.25/0.1, mechanism 0.9, lengthscale 2.77, log marginal -24.26
	// 40 records: noise 2 σ_e, task correlations 0.95/0.8/0.6, mechanism 0.9, lengthscale 2.77, log marginal -95.02
	// {Tunings:2 Hits:16 Coalesced:0 Evictions:0 Len:2}
}

func ExampleTuned_Pin() {
	// Tune once on M without a task, then predict that task's states,
	// whose evidences add a record or two of their history each, with the
	// pinned hyperparameters (lm2lm.Config.HeldOutTask).
	wm, err := rwm.NewTuned(rwm.DefaultEmbeddedConfig(), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	rest := rwmtest.Evidence(30)
	pinned, err := wm.Pin(ctx, rest)
	if err != nil {
		fmt.Println(err)
		return
	}
	extra := rwmtest.Evidence(33).Records()[30:]
	for i := range extra {
		ev, err := rest.Add(extra[:i+1]...)
		if err == nil {
			_, err = pinned.Predict(ctx, rwm.Query{Task: rwmtest.Task(0), Proposal: rwmtest.Proposals()[0], Evidence: ev})
		}
		if err != nil {
			fmt.Println(err)
		}
	}
	fmt.Println("tunings:", wm.Stats().Tunings)
	// Output:
	// tunings: 1
}
