package setting

import (
	"fmt"
	"strings"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/lab"
)

// Profile is the size of one job: a scaled-down version of the paper's
// schedule (METHOD.md §1 Policy optimisation and On-policy calibration: 96
// steps, 277 states of 8 proposals per rollout keeping 256 groups,
// calibration at steps 16, 40, 64 with budgets 31, 38, 31, 100 initial
// records). Every driver reads the same table (Profiles), so a profile
// means the same job everywhere. Its JSON is what result files record as
// the profile's content.
type Profile struct {
	// Name is the profile's name (ProfileNames lists them).
	Name string `json:"name"`
	// Steps is lm2lm.Config.Steps, the policy updates (METHOD.md §1 Policy
	// optimisation: 96).
	Steps int `json:"steps"`
	// States is lm2lm.Config.States, the states drawn per rollout
	// (METHOD.md §1 Policy optimisation: 277).
	States int `json:"states"`
	// Quota is lm2lm.Config.DAPO.Quota, the informative groups kept per
	// rollout (METHOD.md §1 Policy optimisation: 256).
	Quota int `json:"quota"`
	// M0 is the number of initial real records |M_0| (METHOD.md §1 Data
	// and evaluation: 100, drawn uniformly from the mechanism library).
	M0 int `json:"m0"`
	// Schedule is lm2lm.Config.Schedule, the calibration steps and budgets
	// (METHOD.md §1 On-policy calibration: 16, 40, 64 with 31, 38, 31).
	Schedule calibrate.Schedule `json:"schedule"`
	// EvalStates is lm2lm.EvalConfig.StatesPerTask on every held-out task
	// (METHOD.md §1 Data and evaluation: Avg@4 and Best@4 over research
	// states; library choice of how many states per task).
	EvalStates int `json:"eval_states"`
	// EvalHistory is the number of real records of random catalogue
	// changes measured once per held-out task, which the evaluation
	// states draw their histories from (METHOD.md §1 Vocabulary: a state
	// is a task and 0–8 earlier outcomes of it; 0 = empty histories).
	// Library choice: as many as the longest history.
	EvalHistory int `json:"eval_history"`
	// Sizes are the lab v2 tasks per family of the main job
	// (lab.GenerateSuite with lab.DefaultSpace and lab.DefaultSuiteSeed;
	// task IDs are stable, so a small profile's tasks are tasks of the
	// full suite). examples/compare always runs its suite whole: its
	// -suite chooses the split.
	Sizes lab.SuiteSizes `json:"suite_sizes"`
}

// Profiles returns the profile table, from the smallest job:
//
//	tiny     16 steps, 12 states → 8 groups, M_0 8, one calibration of 4 at step 8,
//	         1 evaluation state per held-out task; 1 training and 1 test task per family
//	short    24 steps, 48 → 32, M_0 24, calibrations of 8 at steps 8 and 16,
//	         2 states per task; 4 training, 1 + 1 test tasks per family (about a minute)
//	default  the paper's steps, schedule and real-run budget (100 initial + 100
//	         calibration records) with 128 states → 96 groups; 8 states per task;
//	         lab.DefaultSuiteSizes
//	paper    as default with the paper's 277 states → 256 groups
//
// Every profile draws 8 history records per held-out task.
func Profiles() []Profile {
	full := lab.DefaultSuiteSizes()
	return []Profile{
		{Name: "tiny", Steps: 16, States: 12, Quota: 8, M0: 8, EvalStates: 1, EvalHistory: 8,
			Schedule: calibrate.Schedule{Steps: []int{8}, Budgets: []int{4}}, Sizes: lab.SuiteSizes{Train: 1, TestIn: 1}},
		{Name: "short", Steps: 24, States: 48, Quota: 32, M0: 24, EvalStates: 2, EvalHistory: 8,
			Schedule: calibrate.Schedule{Steps: []int{8, 16}, Budgets: []int{8, 8}}, Sizes: lab.SuiteSizes{Train: 4, TestIn: 1, TestOut: 1}},
		{Name: "default", Steps: 96, States: 128, Quota: 96, M0: 100, EvalStates: 8, EvalHistory: 8,
			Schedule: calibrate.DefaultSchedule(), Sizes: full},
		{Name: "paper", Steps: 96, States: 277, Quota: 256, M0: 100, EvalStates: 8, EvalHistory: 8,
			Schedule: calibrate.DefaultSchedule(), Sizes: full},
	}
}

// ProfileNames lists the profiles' names from the smallest.
func ProfileNames() []string {
	var out []string
	for _, p := range Profiles() {
		out = append(out, p.Name)
	}
	return out
}

// LookupProfile returns the profile of the given name; for any other name
// it returns an error wrapping ErrUnknown that lists the valid names.
func LookupProfile(name string) (Profile, error) {
	for _, p := range Profiles() {
		if p.Name == name {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("%w: profile %q; valid: %s", ErrUnknown, excerpt(name), strings.Join(ProfileNames(), ", "))
}

// ApplyTrainer sets the profile's sizes in cfg: Steps, States,
// DAPO.Quota and Schedule.
func (p Profile) ApplyTrainer(cfg *lm2lm.Config) {
	cfg.Steps, cfg.States, cfg.DAPO.Quota = p.Steps, p.States, p.Quota
	cfg.Schedule = calibrate.Schedule{Steps: append([]int(nil), p.Schedule.Steps...), Budgets: append([]int(nil), p.Schedule.Budgets...)}
}

// CalibrationBudget is the profile's total calibration runs (the sum of
// its schedule's budgets).
func (p Profile) CalibrationBudget() int {
	n := 0
	for _, b := range p.Schedule.Budgets {
		n += b
	}
	return n
}

// LabWMRL is the WMRL configuration of the lab's drivers
// (lm2lm.Config.WMRL, METHOD.md §2): lm2lm.DefaultWMRLConfig, fitted
// sooner. Library choice: the defaults wait for 200 anchor pairs before
// the first isotonic fit, and a laptop-sized job has fewer, so the
// debiaser fits from 32 pairs, refits every 16, with a half-life of 8
// steps and a warm-up of 4.
func LabWMRL() lm2lm.WMRLConfig {
	w := lm2lm.DefaultWMRLConfig()
	w.MinPairs, w.RefitEvery, w.HalfLife, w.Warmup = 32, 16, 8, 4
	return w
}
