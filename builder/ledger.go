package builder

import (
	"sync"

	"github.com/lm2lm/lm2lm/records"
)

// Ledger sums what runs cost. One ledger may be shared by several pools. It
// is safe for concurrent use; the zero value is an empty ledger.
type Ledger struct {
	mu sync.Mutex
	t  LedgerTotals
}

// LedgerTotals is a snapshot of a Ledger.
type LedgerTotals struct {
	Runs       int // executions that finished with an outcome (feasible or infeasible)
	Infeasible int // of Runs, how many were infeasible
	Failed     int // attempts that ended in a transient or permanent failure
	Retries    int // attempts repeated after a transient failure
	Reused     int // requests answered from the records store without running
	Coalesced  int // requests that joined an identical request already in flight
	// Cost sums every attempt that ran, finished or failed: device seconds,
	// wall seconds, FLOPs when reported, and money at the pool's price.
	Cost records.Cost
	// SlotSeconds is the time slots were held by running attempts (wall
	// seconds × slots), measured by the pool: the numerator of slot
	// utilisation.
	SlotSeconds float64
	// Build is what building cost beside the runs: the calls and tokens of
	// a builder that asks an LLM for code (builder/overlay) and the smoke
	// tests it ran. It is not part of Cost, which counts runs only.
	Build BuildTotals
}

// BuildTotals is what a builder spent, summed over builds.
type BuildTotals struct {
	Builds           int   // builds that asked a model (cache misses)
	CacheHits        int   // builds answered from a builder's cache
	Calls            int64 // completions received
	Attempts         int64 // HTTP attempts, failed ones and retries included
	PromptTokens     int64
	CompletionTokens int64
	Money            float64      // the tokens' price at the builder's prices (0 when none are set)
	SmokeRuns        int          // smoke tests run
	SmokeCost        records.Cost // what the smoke tests cost
}

// Totals returns a snapshot.
func (l *Ledger) Totals() LedgerTotals {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.t
}

// Add applies f to the totals under the ledger's lock.
func (l *Ledger) Add(f func(t *LedgerTotals)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(&l.t)
}
