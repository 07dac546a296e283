package serve

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/lm2lm/lm2lm/loop"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// op is one journalled state change, replayed in order after the
// checkpoint.
type op struct {
	Kind  string   `json:"op"` // "states", "group", "step", "calibrate", "request" or "eval"
	Key   string   `json:"key,omitempty"`
	N     int      `json:"n,omitempty"`
	Split string   `json:"split,omitempty"`
	Step  int      `json:"step,omitempty"`
	Group *groupOp `json:"group,omitempty"`
	// Sum is a request's body digest (request).
	Sum string `json:"sum,omitempty"`
	// Runs, Cost and Body are an evaluation's paid runs and answer (eval).
	Runs int             `json:"runs,omitempty"`
	Cost *records.Cost   `json:"cost,omitempty"`
	Body json.RawMessage `json:"body,omitempty"`
	// Point and Real are a calibration point and its runs, applied from
	// Step on (calibrate).
	Point int            `json:"point,omitempty"`
	Real  []loop.RealRun `json:"real,omitempty"`

	// parsed holds a group op's completions as the live path already
	// parsed them (never journalled; replay parses again).
	parsed []proposer.Sample
}

// apply performs o on the state. It is deterministic: the journal replays
// through it. The caller holds mu (or owns the service while loading).
func (s *Service) apply(o op) (json.RawMessage, error) {
	switch o.Kind {
	case "states":
		if o.N < 1 || o.N > s.cfg.MaxStates || (o.Split != SplitTrain && o.Split != SplitTest) {
			return nil, fmt.Errorf("states op: n = %d, split %q", o.N, records.Excerpt(o.Split))
		}
		b, err := json.Marshal(s.applyStates(o))
		if err != nil {
			return nil, err
		}
		s.cache.put(o.Key, b) // the ids issued, not the prompts: renderStates makes them again
		return b, nil
	case "group":
		if o.Group == nil {
			return nil, fmt.Errorf("group op without its group")
		}
		if _, err := s.applyGroup(o.Group, o.parsed); err != nil {
			return nil, err
		}
	case "step":
		if cur := s.loop.Status().Step; o.Step < cur || o.Step > MaxStep {
			return nil, fmt.Errorf("step op: step %d after step %d", o.Step, cur)
		}
		s.loop.Observe(o.Step)
		s.notePick()
	case "calibrate":
		if err := s.applyCalibration(o.Point, o.Step, o.Real); err != nil {
			return nil, err
		}
	case "request":
		b, err := json.Marshal(requestRecord{Sum: o.Sum, Step: o.Step})
		if err != nil {
			return nil, err
		}
		s.reqs.put(o.Key, b)
		s.requests++
	case "eval":
		if o.Runs < 0 || o.Cost == nil {
			return nil, fmt.Errorf("eval op: %d runs, cost %v", o.Runs, o.Cost)
		}
		s.evalRuns += o.Runs
		s.evalCost = s.evalCost.Add(*o.Cost)
		s.cache.put(o.Key, o.Body)
		return o.Body, nil
	default:
		return nil, fmt.Errorf("unknown op %s", strconv.Quote(records.Excerpt(o.Kind)))
	}
	s.met.update(s)
	return nil, nil
}
