package lab

import (
	"errors"
	"fmt"

	"github.com/lm2lm/lm2lm/internal/stat"
	"github.com/lm2lm/lm2lm/records"
)

// UnmeasuredName is the name of the lab's unmeasured training tasks:
// tasks of the training space that no real run measures, whose states a
// trainer draws beside the training tasks' and the world model alone
// rewards (loop.Setup.Unmeasured). Their generator streams (SplitStream of
// IDs under this name) are those of no split and of no pretraining task.
const UnmeasuredName = "v2-unmeasured"

// UnmeasuredTasks returns perFamily unmeasured tasks per V2 family drawn
// from the training space (DefaultSpace, the V2 suites' training split's),
// GenerateSplit(UnmeasuredName, one RegionIn region, perFamily), with IDs
// "v2-unmeasured/in-distribution/<family>/<index>" and records.Train as
// Split. A task does not change when perFamily grows. No training,
// validation, test or pretraining task is among them.
func UnmeasuredTasks(perFamily int) []TaskSpec {
	tasks := GenerateSplit(UnmeasuredName, []Region{{RegionIn, DefaultSpace()}}, SplitSizes{In: perFamily}).Tasks
	for i := range tasks {
		tasks[i].Split = records.Train
	}
	return tasks
}

// ErrNoFamily says an unmeasured task's family has no measured task to
// take its reference loss and seed noise from.
var ErrNoFamily = errors.New("lab: no measured task of the family")

// Unmeasured returns task id of the lab as a research state's task without
// running anything: its descriptors, budget, metric and description are its
// spec's, as Task's are, and its reference loss b_e and seed noise σ_e,
// which only reference runs measure, are the medians over the tasks of
// measured that share its family (the reward's τ_e then starts from the
// family's median σ_e, METHOD.md §1 Reward 1). An unknown ID wraps
// ErrUnknownTask; a family without a measured task, ErrNoFamily.
func (l *Lab) Unmeasured(id string, measured []records.Task) (records.Task, error) {
	spec, err := l.Spec(id)
	if err != nil {
		return records.Task{}, err
	}
	var refs, noise []float64
	for _, t := range measured {
		if t.Family == spec.Family {
			refs, noise = append(refs, t.RefLoss), append(noise, t.SeedNoise)
		}
	}
	if len(refs) == 0 {
		return records.Task{}, fmt.Errorf("%w: task %q, family %q", ErrNoFamily, records.Excerpt(id), spec.Family)
	}
	if _, err := l.data(spec); err != nil {
		return records.Task{}, err
	}
	t := records.Task{
		ID: spec.ID, Family: spec.Family, Split: spec.Split, Metric: spec.Metric(),
		RefLoss: stat.Median(refs), SeedNoise: max(stat.Median(noise), minSeedNoise), Budget: spec.Config.Steps,
		Description: spec.Description(), Descriptors: l.descriptors(spec),
	}
	if err := t.Validate(); err != nil {
		return records.Task{}, fmt.Errorf("lab: unmeasured task %q: %w", records.Excerpt(id), err)
	}
	return t, nil
}
