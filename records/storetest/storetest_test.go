package storetest_test

import (
	"testing"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/records/storetest"
)

func TestRecordFixtures(t *testing.T) {
	keys := map[string]bool{}
	for i := range 500 {
		r := storetest.Record(i)
		if err := r.Validate(); err != nil {
			t.Fatalf("Record(%d) invalid: %v", i, err)
		}
		keys[r.Task.ID+" "+r.Proposal.Key()+" "+string(r.Source)] = true
	}
	if len(keys) < 50 {
		t.Errorf("only %d distinct (task, key, source) among 500 fixtures", len(keys))
	}
}

// TestRunMemStore runs the suite on the reference in-memory store; the
// records package runs it on both of its stores.
func TestRunMemStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) records.Store { return records.NewMemStore() })
}
