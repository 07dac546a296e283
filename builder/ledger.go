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
