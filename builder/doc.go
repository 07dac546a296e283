// Package builder turns proposals into runs and executes them (METHOD.md §1
// Vocabulary, Builder): Builder makes a Job from a task and a proposal (or
// reports it infeasible), Executor runs a Job and returns its Outcome. The
// package holds a bounded local pool and a subprocess executor for host
// training scripts; subpackage slurm runs the same protocol on a Slurm
// cluster; buildertest is a conformance suite.
package builder
