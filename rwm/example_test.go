package rwm_test

import (
	"context"
	"fmt"

	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

func ExampleLedger() {
	// The usual stack: Ledger → Cache → Limit → Retry → backend.
	var backend rwm.WorldModel = rwm.NewEmbedded(rwm.DefaultEmbeddedConfig())
	cache := rwm.NewCache(rwm.NewLimit(rwm.NewRetry(backend, rwm.DefaultRetryConfig()), 4), rwm.DefaultCacheConfig())
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
