package lab

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
