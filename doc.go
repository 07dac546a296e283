// Package lm2lm trains a proposer to suggest changes to language-model
// training recipes that really lower validation loss.
//
// The package map and the method are described in the README; every formula
// is restated in METHOD.md §1 (LM2LM) and §2 (WMRL).
package lm2lm
