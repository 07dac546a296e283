package records

import (
	"context"
	"fmt"
	"sync"
)

// index holds a store's records in append order, with lookups by task ID
// and by proposal key. It is not safe for concurrent use by itself.
type index struct {
	recs   []Record
	keys   []string         // keys[j] = recs[j].Proposal.Key()
	byTask map[string][]int // task ID -> positions, ascending
	byKey  map[string][]int // proposal key -> positions, ascending
}

func newIndex() *index {
	return &index{byTask: map[string][]int{}, byKey: map[string][]int{}}
}

// add appends copies of rs, which must be valid.
func (x *index) add(rs ...Record) {
	for _, r := range rs {
		x.addOwned(cloneRecord(r))
	}
}

// addOwned appends r itself: the caller hands over its maps and slices.
func (x *index) addOwned(rs ...Record) {
	for _, r := range rs {
		j := len(x.recs)
		k := r.Proposal.Key()
		x.recs = append(x.recs, r)
		x.keys = append(x.keys, k)
		x.byTask[r.Task.ID] = append(x.byTask[r.Task.ID], j)
		x.byKey[k] = append(x.byKey[k], j)
	}
}

// scan returns copies of the records that match f, in append order. It
// walks the shorter of the task and key postings when f names either.
func (x *index) scan(f Filter) []Record {
	var out []Record
	match := func(j int) {
		r := x.recs[j]
		if (f.TaskID == "" || r.Task.ID == f.TaskID) &&
			(f.Source == "" || r.Source == f.Source) &&
			(f.Key == "" || x.keys[j] == f.Key) {
			out = append(out, cloneRecord(r))
		}
	}
	var post []int
	switch {
	case f.TaskID != "" && f.Key != "":
		post = x.byTask[f.TaskID]
		if k := x.byKey[f.Key]; len(k) < len(post) {
			post = k
		}
	case f.TaskID != "":
		post = x.byTask[f.TaskID]
	case f.Key != "":
		post = x.byKey[f.Key]
	default:
		out = make([]Record, 0, len(x.recs))
		for j := range x.recs {
			match(j)
		}
		return out
	}
	for _, j := range post {
		match(j)
	}
	return out
}

// validateBatch checks every record of a batch for a store.
func validateBatch(rs []Record) error {
	for i, r := range rs {
		if err := checkStorable(r); err != nil {
			return fmt.Errorf("records: append record %d of %d: %w", i, len(rs), err)
		}
		// What Evidence would refuse never enters a store: a feasible
		// real record whose loss or gain no run could measure.
		if err := Plausible(r); err != nil {
			return fmt.Errorf("records: append record %d of %d: %w", i, len(rs), err)
		}
	}
	return nil
}

// MemStore is a Store that keeps records in memory only; it loses them when
// the process exits. It is meant for tests, examples and short-lived runs.
// The zero value is not usable; call NewMemStore. MemStore is safe for
// concurrent use.
type MemStore struct {
	mu     sync.RWMutex
	idx    *index
	closed bool
}

var (
	_ Store = (*MemStore)(nil)
	_ Store = (*FileStore)(nil)
)

// NewMemStore returns an empty in-memory store.
func NewMemStore() *MemStore { return &MemStore{idx: newIndex()} }

// Append validates every record of rs and stores copies of all of them, or
// of none when any is invalid (an error wrapping ErrInvalid) or
// implausible (Plausible; ErrImplausible). The copies
// lose any monotonic clock reading, and empty Params and Seeds become nil,
// exactly as in a FileStore.
func (m *MemStore) Append(ctx context.Context, rs ...Record) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("records: append: %w", err)
	}
	if err := validateBatch(rs); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("records: append: %w", ErrClosed)
	}
	m.idx.add(rs...)
	return nil
}

// Scan returns copies of the records that match f, in append order.
func (m *MemStore) Scan(ctx context.Context, f Filter) ([]Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("records: scan: %w", err)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, fmt.Errorf("records: scan: %w", ErrClosed)
	}
	return m.idx.scan(f), nil
}

// Len returns the number of records in the store.
func (m *MemStore) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.idx.recs)
}

// Close releases the records; later calls to Append and Scan return
// ErrClosed. Closing twice returns ErrClosed.
func (m *MemStore) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("records: close: %w", ErrClosed)
	}
	m.closed = true
	m.idx = newIndex()
	return nil
}
