// Package records holds the research vocabulary of lm2lm (METHOD.md §1
// Vocabulary): tasks, proposals and their canonical keys, records of
// experiments, research states, the Evidence type that admits only real
// records as world-model context, the Store contract with an in-memory and a
// durable file store, and the state pool used for synthetic state expansion
// (METHOD.md §1 Synthetic state expansion).
//
// The vocabulary types are plain values. Validation is explicit: call
// Validate before trusting a value that came from outside the process.
// Stores do I/O and are safe for concurrent use; everything else in the
// package is pure (Pool is also safe for concurrent use, and draws
// randomness only from the *rand.Rand it is given). The package imports the
// standard library only.
//
// MemStore keeps records in memory; FileStore keeps them in an append-only
// file, one checksummed line per record, fsynced before Append returns, with
// a torn tail dropped on open and any other damage reported as a
// *CorruptError naming the line (the format is documented on FileStore).
// Seen lets an executor skip a run that already has a real record. The
// conformance suite for any Store is records/storetest.
package records
