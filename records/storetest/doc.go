// Package storetest checks implementations of records.Store against the
// contract written on that interface (METHOD.md §1 Vocabulary: the records
// of experiments), in the style of testing/fstest: a store implementation
// calls Run from its own tests.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) records.Store { return records.NewMemStore() })
//	}
//
// Run checks round trips with deep equality, filters, append order, all-or-
// none appends of batches with an invalid record, validation errors,
// cancelled contexts, copies handed to and from the store, concurrent
// appends and scans (run it under -race), and Close for stores that
// implement io.Closer. Record returns valid, varied fixture records that
// other tests may use too.
//
// The package does no I/O of its own; Run starts goroutines only inside its
// concurrency check and waits for all of them.
package storetest
