package reward

import (
	"errors"
	"fmt"
	"math"
)

// Status is a rung of WMRL's execution ladder (METHOD.md §2): what running
// a code solution to an AutoResearch task did. Real execution grades it; a
// verdict world model predicts it.
type Status string

// The rungs, bottom to top, with their names on the wire (the verdict
// world model's JSON schema uses the same strings).
const (
	// Malformed: the solution is not a program at all (empty, or no code
	// could be read from it). METHOD.md §2 gives it no rung; library
	// choice: it scores like a syntax error, 0.0, since nothing could run.
	Malformed Status = "malformed"
	// SyntaxError: the code does not parse. Score 0.0.
	SyntaxError Status = "syntax_err"
	// RuntimeError: the code parses but fails while running (an
	// exception, an exhausted time or memory budget). Score 0.1.
	RuntimeError Status = "runtime_err"
	// RanNoSubmission: the code ran to the end without writing a usable
	// submission. Score 0.2.
	RanNoSubmission Status = "ran_no_sub"
	// ValidSubmission: the code wrote a submission that was scored. Score
	// 0.5 + 0.5·q, q the leaderboard percentile in [0, 1].
	ValidSubmission Status = "valid"
)

// Statuses lists the rungs bottom to top.
func Statuses() []Status {
	return []Status{Malformed, SyntaxError, RuntimeError, RanNoSubmission, ValidSubmission}
}

// Valid reports whether s is one of the rungs.
func (s Status) Valid() bool {
	switch s {
	case Malformed, SyntaxError, RuntimeError, RanNoSubmission, ValidSubmission:
		return true
	}
	return false
}

// Rank is s's height on the ladder: 0 for Malformed and SyntaxError (both
// score 0), then 1, 2, 3; −1 for an unknown status. Lower ranks are worse.
func (s Status) Rank() int {
	switch s {
	case Malformed, SyntaxError:
		return 0
	case RuntimeError:
		return 1
	case RanNoSubmission:
		return 2
	case ValidSubmission:
		return 3
	}
	return -1
}

// Errors of the ladder.
var (
	// ErrStatus: a status that is not a rung of the ladder.
	ErrStatus = errors.New("reward: unknown ladder status")
	// ErrQuality: a quality outside [0, 1] or not a number.
	ErrQuality = errors.New("reward: quality outside [0, 1]")
)

// LadderScore is WMRL's execution score of a solution (METHOD.md §2):
// syntax error (and Malformed) 0.0, runtime error 0.1, ran without a
// submission 0.2, valid 0.5 + 0.5·q where q ∈ [0, 1] is the submission's
// leaderboard percentile. q is read only for ValidSubmission. An unknown
// status wraps ErrStatus; a q outside [0, 1] (or NaN) for a valid
// submission wraps ErrQuality. The score lies in [0, 1].
func LadderScore(s Status, q float64) (float64, error) {
	switch s {
	case Malformed, SyntaxError:
		return 0, nil
	case RuntimeError:
		return 0.1, nil
	case RanNoSubmission:
		return 0.2, nil
	case ValidSubmission:
		if !(q >= 0 && q <= 1) {
			return 0, fmt.Errorf("%w: q = %g", ErrQuality, q)
		}
		return 0.5 + 0.5*q, nil
	}
	return 0, fmt.Errorf("%w: %q", ErrStatus, string(s))
}

// Percentile is a score's standing on a leaderboard of reference scores
// (METHOD.md §2: "leaderboard percentile"), in [0, 1]: the fraction of
// entries it beats, ties counting half (mid-rank; library choice, so that
// matching every entry gives 0.5 and the result does not depend on the
// order of the board). higherIsBetter says the metric's direction. An
// empty board gives 0.5 (library choice: no information, the middle). A
// NaN score beats nothing; NaN entries are skipped.
func Percentile(score float64, board []float64, higherIsBetter bool) float64 {
	if !higherIsBetter {
		score = -score
	}
	var beaten float64
	n := 0
	for _, b := range board {
		if math.IsNaN(b) {
			continue
		}
		n++
		if !higherIsBetter {
			b = -b
		}
		switch {
		case score > b:
			beaten++
		case score == b:
			beaten += 0.5
		}
	}
	if n == 0 {
		return 0.5
	}
	return beaten / float64(n)
}

// Bucket is a coarse predicted quality of a valid submission, as a verdict
// world model states it.
type Bucket string

// The buckets, worst to best.
const (
	Low  Bucket = "low"
	Fair Bucket = "fair"
	Mid  Bucket = "mid"
	High Bucket = "high"
)

// Buckets lists the buckets worst to best.
func Buckets() []Bucket { return []Bucket{Low, Fair, Mid, High} }

// QualityTable maps predicted quality buckets to leaderboard percentiles q
// for LadderScore. METHOD.md §2 gives no mapping; library choice: each
// bucket is a quarter of the leaderboard and maps to its midpoint
// (DefaultQualityTable: 0.125, 0.375, 0.625, 0.875), and a percentile goes
// back to the bucket whose quarter holds it (BucketOf). Hosts with another
// reading of the buckets set their own values.
type QualityTable struct {
	Low, Fair, Mid, High float64
}

// DefaultQualityTable returns the quarter midpoints.
func DefaultQualityTable() QualityTable {
	return QualityTable{Low: 0.125, Fair: 0.375, Mid: 0.625, High: 0.875}
}

// Validate reports whether every value is in [0, 1] and the values are
// non-decreasing from Low to High, wrapping ErrConfig.
func (t QualityTable) Validate() error {
	vs := []float64{t.Low, t.Fair, t.Mid, t.High}
	for i, v := range vs {
		if !(v >= 0 && v <= 1) {
			return fmt.Errorf("%w: quality table %s = %g, want in [0, 1]", ErrConfig, Buckets()[i], v)
		}
		if i > 0 && v < vs[i-1] {
			return fmt.Errorf("%w: quality table %s = %g < %s = %g, want non-decreasing", ErrConfig,
				Buckets()[i], v, Buckets()[i-1], vs[i-1])
		}
	}
	return nil
}

// Quality returns the percentile of bucket b; an unknown bucket wraps
// ErrBucket.
func (t QualityTable) Quality(b Bucket) (float64, error) {
	switch b {
	case Low:
		return t.Low, nil
	case Fair:
		return t.Fair, nil
	case Mid:
		return t.Mid, nil
	case High:
		return t.High, nil
	}
	return 0, fmt.Errorf("%w: %q", ErrBucket, string(b))
}

// ErrBucket: a quality bucket that is not low, fair, mid or high.
var ErrBucket = errors.New("reward: unknown quality bucket")

// BucketOf returns the bucket whose quarter of [0, 1] holds the percentile
// q: [0, 0.25) low, [0.25, 0.5) fair, [0.5, 0.75) mid, [0.75, 1] high
// (values below 0 are low, above 1 high, NaN low). It is the inverse of
// DefaultQualityTable on the quarter midpoints.
func BucketOf(q float64) Bucket {
	switch {
	case q >= 0.75:
		return High
	case q >= 0.5:
		return Mid
	case q >= 0.25:
		return Fair
	}
	return Low
}
