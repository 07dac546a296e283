// Package corpus loads the text corpora of the lab (METHOD.md §1 Vocabulary:
// each task's LM development environment trains on one corpus) and splits
// them into training and validation symbols.
//
// Five sources are supported, three of which ship with every Go
// installation: the Opticks text (GOROOT/src/testdata/Isaac.Newton-Opticks.txt,
// prose), a Go-source corpus made of a deterministic selection of .go files
// under GOROOT/src (code), the HTML documents under GOROOT/doc (GoDoc,
// markup); the Debian corpora (DebianSources: licence texts, debconf's Perl
// modules and manual pages under /usr/share, each in a validation and a
// test half); and any text file the caller names. KindOf says what kind of
// text a built-in corpus is; Slice cuts a small training slice (a data
// regime) out of a training split. Bytes are folded to Symbols (96) symbols,
// one symbol per byte, so a loss per symbol is a loss per byte of the
// original text (see Fold for the folding table).
//
// Splits interleave blocks (every ValEvery-th block of BlockSize symbols is
// validation) rather than cutting off the tail: the last tenth of the Opticks
// is a list of queries that reads unlike the rest of the book.
//
// Loading reads files (and may run `go env GOROOT` once to find GOROOT);
// Fold, FromBytes and Split are pure. A *Corpus is immutable after loading
// and safe for concurrent use.
package corpus
