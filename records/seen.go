package records

import (
	"context"
	"fmt"
)

// Seen reports whether s already holds a real record of task taskID whose
// proposal has canonical key key (see Proposal.Key) and whose seeds include
// seed, and returns the earliest such record. Executors call it before
// paying for a run: a real record with that seed is the result of exactly
// that run. Infeasible real records count, since the run was made; predicted
// and synthetic records never do.
func Seen(ctx context.Context, s Store, taskID, key string, seed uint64) (Record, bool, error) {
	rs, err := s.Scan(ctx, Filter{TaskID: taskID, Key: key, Source: Real})
	if err != nil {
		return Record{}, false, fmt.Errorf("records: seen %s/%s: %w", Excerpt(taskID), Excerpt(key), err)
	}
	for _, r := range rs {
		if r.HasSeed(seed) {
			return r, true, nil
		}
	}
	return Record{}, false, nil
}
