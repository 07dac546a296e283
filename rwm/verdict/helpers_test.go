package verdict

import (
	"encoding/json"
	"strings"

	"github.com/lm2lm/lm2lm/reward"
)

// answer renders a verdict as the model would, one prediction per check.
func answer(reason string, ps ...Prediction) string {
	type wire struct {
		Reason      string       `json:"reason"`
		Predictions []Prediction `json:"predictions"`
	}
	b, _ := json.Marshal(wire{reason, ps})
	return string(b)
}

// all returns n copies of p.
func all(n int, p Prediction) []Prediction {
	out := make([]Prediction, n)
	for i := range out {
		out[i] = p
	}
	return out
}

var okPred = Prediction{Status: reward.ValidSubmission, Quality: reward.Mid, Confidence: 0.9, Feedback: "fine"}

// solutionOf extracts the solution's code from a user message: the lines
// after "SOLUTION" inside the fence, without their numbers.
func solutionOf(user string) (code, fence string, ok bool) {
	lines := strings.Split(user, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "<<<DATA-") {
			start, fence = i, strings.TrimPrefix(l, "<<<")
			break
		}
	}
	if start < 0 || start+2 >= len(lines) || !strings.HasPrefix(lines[start+1], "TASK ") || lines[start+2] != "SOLUTION" {
		return "", "", false
	}
	var out []string
	for _, l := range lines[start+3:] {
		if l == fence+">>>" {
			return strings.Join(out, "\n"), fence, true
		}
		_, c, found := strings.Cut(l, "| ")
		if !found {
			return "", "", false
		}
		out = append(out, c)
	}
	return "", "", false
}
