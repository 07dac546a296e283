// Package buildertest holds the conformance suites of package builder's
// contracts (METHOD.md §1 Builder and executor), for hosts that implement
// their own:
//
//   - Run checks a builder.Executor: results, every failure class, cancel,
//     concurrency, and proposal text that must reach a run only as data.
//     Executors that run test jobs as Spec asks (Scripted in process,
//     examples/trainscript behind the subprocess protocol, builder/slurm)
//     pass the whole suite; an executor of real jobs such as the lab's
//     passes it with Options.Builder set, which builds the jobs and skips
//     the subtests that need scripted failures.
//   - RunBuilder checks a builder.Builder: jobs that carry the task and
//     proposal they were built from, deterministic builds, ErrInfeasible for
//     proposals that cannot be built, concurrent use, text kept as data.
//
// It also holds Scripted, an in-process fake executor with the failure
// classes of the subprocess protocol; Func, an executor from a function;
// Spec, the test job description; and Quadratic, the deterministic
// "training" of test jobs. Random choices come from explicit seeds
// (Options.Seed), never from the global source.
package buildertest
