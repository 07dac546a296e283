// Package labtest holds fixtures shared by the tests of the lab and of the
// programs that drive it.
package labtest

import "github.com/lm2lm/lm2lm/lab"

// DivergingTwin returns a copy of spec, with "-hot" appended to its ID,
// whose reference run diverges: SGD with momentum at learning rate 100 and
// no gradient clipping. Drivers must leave such a task out and name it
// (lab.ErrReference) instead of stopping.
func DivergingTwin(spec lab.TaskSpec) lab.TaskSpec {
	hot := spec
	hot.ID = spec.ID + "-hot"
	hot.Config.Optimizer, hot.Config.LR, hot.Config.ClipNorm, hot.Config.Beta1 = "momentum", 100, 0, 0.9
	return hot
}
