package verdict

import (
	"fmt"
	"math"

	"github.com/lm2lm/lm2lm/reward"
	"github.com/lm2lm/lm2lm/rwm"
)

// Check is one item of the check battery: a short name and the instruction
// the world model follows for it.
type Check struct {
	Name        string `json:"name"`
	Instruction string `json:"instruction"`
}

// DefaultChecks returns WMRL's eight checks (METHOD.md §2: "imports and
// names, API calls, file and column references, compute budget, …"; the
// wording of each instruction is a library choice).
func DefaultChecks() []Check {
	return []Check{
		{"imports-and-names", "Every imported module exists in the stated environment and every name is defined before it is used."},
		{"api-calls", "Every library function, class and method is called with arguments and keywords its API accepts."},
		{"data-references", "Every file, column and key the code reads exists in the task's stated data layout."},
		{"shapes-and-dtypes", "Array shapes and dtypes agree where they meet (fit/predict inputs, concatenations, targets)."},
		{"compute-budget", "The code finishes within the task's time and memory limits on the stated data size."},
		{"other-runtime-errors", "Nothing else raises at run time (division by zero, bad indexing, unhandled missing values)."},
		{"submission", "The code writes the required submission file with the required columns and one row per test item."},
		{"quality", "If it runs and submits, how good the submission is against the task's leaderboard."},
	}
}

// Prediction is one check's prediction of the execution outcome, as the
// world model states it (the schema's predictions[i]).
type Prediction struct {
	Status     reward.Status `json:"status"`
	ErrorType  string        `json:"error_type"`
	ErrorLine  int           `json:"error_line"`
	Quality    reward.Bucket `json:"quality_bucket"`
	Confidence float64       `json:"confidence"`
	Feedback   string        `json:"feedback"`
}

// Verdict is the world model's whole answer: one prediction per check of
// the battery, in battery order.
type Verdict struct {
	Reason      string       `json:"reason"`
	Predictions []Prediction `json:"predictions"`
}

// Outcome is a verdict aggregated onto the ladder.
type Outcome struct {
	Status reward.Status
	// Q is the predicted leaderboard percentile (meaningful for
	// reward.ValidSubmission).
	Q float64
	// Score is reward.LadderScore(Status, Q); Low and High are the lowest
	// and highest score of the single predictions (Low ≤ Score ≤ High).
	Score, Low, High float64
	// Decider is the index of the prediction that set a failing Status, or
	// −1 when the verdict is a valid submission.
	Decider int
}

// Aggregate turns a verdict into one ladder outcome (library choice;
// METHOD.md §2 says only that the score aggregates the checks):
//
//   - the verdict fails when some prediction other than valid has
//     confidence ≥ minConfidence; the lowest such rung wins (ties: the
//     higher confidence, then the earlier check), and Score is its
//     ladder score;
//   - otherwise it is a valid submission with Q the confidence-weighted
//     mean of tab's values for the quality buckets of the predictions that
//     say valid (the plain mean when their confidences sum to zero; all
//     predictions' buckets when none says valid).
//
// Low and High bracket Score by the single predictions' own scores. It
// returns an error wrapping rwm.ErrBadPrediction for an empty verdict or a
// prediction with an unknown status or bucket (Parse rejects those
// earlier).
func Aggregate(v Verdict, tab reward.QualityTable, minConfidence float64) (Outcome, error) {
	if len(v.Predictions) == 0 {
		return Outcome{}, fmt.Errorf("%w: verdict has no predictions", rwm.ErrBadPrediction)
	}
	out := Outcome{Decider: -1, Low: math.Inf(1), High: math.Inf(-1)}
	var wq, w, allQ float64
	nValid := 0
	for i, p := range v.Predictions {
		q, err := tab.Quality(p.Quality)
		if err != nil {
			return Outcome{}, fmt.Errorf("%w: prediction %d: %w", rwm.ErrBadPrediction, i, err)
		}
		s, err := reward.LadderScore(p.Status, q)
		if err != nil {
			return Outcome{}, fmt.Errorf("%w: prediction %d: %w", rwm.ErrBadPrediction, i, err)
		}
		out.Low, out.High = math.Min(out.Low, s), math.Max(out.High, s)
		allQ += q
		if p.Status == reward.ValidSubmission {
			wq, w = wq+p.Confidence*q, w+p.Confidence
			nValid++
			continue
		}
		if p.Confidence >= minConfidence && beats(p, out.Decider, v.Predictions) {
			out.Decider = i
		}
	}
	if out.Decider >= 0 {
		out.Status = v.Predictions[out.Decider].Status
		out.Score, _ = reward.LadderScore(out.Status, 0)
		return out, nil
	}
	out.Status = reward.ValidSubmission
	switch {
	case nValid == 0:
		out.Q = allQ / float64(len(v.Predictions))
	case w > 0:
		out.Q = wq / w
	default:
		var sum float64
		for _, p := range v.Predictions {
			if p.Status == reward.ValidSubmission {
				q, _ := tab.Quality(p.Quality)
				sum += q
			}
		}
		out.Q = sum / float64(nValid)
	}
	out.Q = math.Min(1, math.Max(0, out.Q))
	out.Score, _ = reward.LadderScore(reward.ValidSubmission, out.Q)
	out.Low, out.High = math.Min(out.Low, out.Score), math.Max(out.High, out.Score)
	return out, nil
}

// beats reports whether p should replace the current decider (index cur,
// −1 for none): a lower rung, or the same rung with a higher confidence.
func beats(p Prediction, cur int, ps []Prediction) bool {
	if cur < 0 {
		return true
	}
	c := ps[cur]
	if p.Status.Rank() != c.Status.Rank() {
		return p.Status.Rank() < c.Status.Rank()
	}
	return p.Confidence > c.Confidence
}
