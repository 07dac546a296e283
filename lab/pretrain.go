package lab

import (
	"errors"
	"fmt"
	"strings"

	"github.com/lm2lm/lm2lm/records"
)

// PretrainName is the name of the lab's pretraining corpus: tasks outside
// every split, whose landscapes a world model's prior is fitted on
// (rwm.FitPrior). Its generator streams (SplitStream of IDs under this
// name) are those of no split: the V2 suites' streams start with the suite
// seed (GenerateSuite; suite seeds 1 and 2 are the training, validation,
// test and v2-val2 tasks), and the V3 splits' with the hash of their own
// names.
const PretrainName = "v2-pretrain"

// PretrainTasks returns the pretraining corpus's tasks: perFamily tasks
// per V2 family drawn from the in-distribution space (DefaultSpace) only,
// GenerateSplit(PretrainName, one RegionIn region, perFamily), with IDs
// "v2-pretrain/in-distribution/<family>/<index>". A task does not change
// when perFamily grows. The corpus is outside knowledge: no training,
// validation or test task is among them, and no method's real-run budget
// counts their runs.
func PretrainTasks(perFamily int) []TaskSpec {
	return GenerateSplit(PretrainName, []Region{{RegionIn, DefaultSpace()}}, SplitSizes{In: perFamily}).Tasks
}

// ErrNotPretrain says a set of records meant as the pretraining corpus
// holds a run of a task outside it: the corpus never holds a training,
// validation or test task.
var ErrNotPretrain = errors.New("lab: a task outside the pretraining corpus")

// PretrainRuns returns the real proposal runs of rs, the records of a
// pretraining corpus's store, in rs's order: reference runs
// (records.NoChange) and records of other sources are left out. A record
// of a task whose ID is not under PretrainName is an error wrapping
// ErrNotPretrain that names it.
func PretrainRuns(rs []records.Record) ([]records.Record, error) {
	var out []records.Record
	for _, r := range rs {
		if !strings.HasPrefix(r.Task.ID, PretrainName+"/") {
			return nil, fmt.Errorf("%w: %q", ErrNotPretrain, records.Excerpt(r.Task.ID))
		}
		if r.Source == records.Real && !r.Proposal.IsNoChange() {
			out = append(out, r)
		}
	}
	return out, nil
}
