// Command trainscript is an example host training script that speaks the
// builder's subprocess protocol (see package builder): it is started as
//
//	trainscript <job file> <result file>
//
// reads the job (task, proposal, seed, budget, spec) as JSON from the first
// path, "trains", writes the result JSON to the second path and exits 0 on
// success, 3 (builder.ExitInfeasible) when the proposal is infeasible and
// 75 (builder.ExitTransient) on infrastructure trouble.
//
// Its training is the deterministic quadratic of buildertest.Quadratic, so
// tests know the loss to expect. The job's spec (buildertest.Spec) can make
// it crash, hang, print garbage, write NaN, exit infeasible or transient:
// every behaviour comes from the job file, none from the command line, and
// the proposal text is only ever read as data.
//
// A real script does the same with its own training loop: read the job,
// apply the proposal to its recipe, train with the seed for the task's
// budget, measure the validation loss, write {"loss": ℓ}.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-child" {
		// A child left in the process group by a hanging run.
		time.Sleep(time.Hour)
		return
	}
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: trainscript <job file> <result file>")
		os.Exit(2)
	}
	os.Exit(run(os.Args[1], os.Args[2]))
}

// run runs the job at jobPath, writes its result to resultPath and returns
// the exit code.
func run(jobPath, resultPath string) int {
	job, spec, code := readJob(jobPath)
	if code != 0 {
		return code
	}
	fmt.Fprintf(os.Stderr, "trainscript: task %s proposal %s seed %d budget %d behaviour %q\n",
		job.Task.ID, job.Key, job.Seed, job.Budget, spec.Behaviour)
	fmt.Fprintln(os.Stderr, buildertest.TextLine(job.Proposal.Text))
	start := time.Now()
	if code, done := misbehave(spec, resultPath); done {
		return code
	}
	return train(job, spec, resultPath, start)
}

// readJob reads and checks the job file and its spec; a nonzero code is
// the exit code of a job that cannot be read.
func readJob(jobPath string) (builder.JobFile, buildertest.Spec, int) {
	var job builder.JobFile
	b, err := os.ReadFile(jobPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "trainscript:", err)
		return job, buildertest.Spec{}, builder.ExitTransient
	}
	if err := json.Unmarshal(b, &job); err != nil || job.Protocol != builder.ProtocolVersion {
		fmt.Fprintf(os.Stderr, "trainscript: bad job file (protocol %d): %v\n", job.Protocol, err)
		return job, buildertest.Spec{}, 2
	}
	spec, err := buildertest.ParseSpec(job.Spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "trainscript:", err)
		return job, spec, 2
	}
	return job, spec, 0
}

// writeResult writes the result JSON s to resultPath and returns the exit
// code.
func writeResult(resultPath, s string) int {
	if err := os.WriteFile(resultPath, []byte(s), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "trainscript:", err)
		return builder.ExitTransient
	}
	return 0
}

// misbehave acts out the spec's failure behaviour, if it has one (done),
// and returns the exit code.
func misbehave(spec buildertest.Spec, resultPath string) (code int, done bool) {
	switch spec.Behaviour {
	case buildertest.Crash:
		fmt.Fprintln(os.Stderr, "trainscript: segmentation fault (simulated)")
		return 1, true
	case buildertest.Transient:
		fmt.Fprintln(os.Stderr, "trainscript: no device available")
		return builder.ExitTransient, true
	case buildertest.Garbage:
		fmt.Println("loss is about 1.2, I think")
		return writeResult(resultPath, "this is not JSON {"), true
	case buildertest.NaN:
		return writeResult(resultPath, `{"loss": NaN}`), true
	case buildertest.Infeasible:
		r, _ := json.Marshal(map[string]string{"infeasible": spec.Reason})
		if c := writeResult(resultPath, string(r)); c != 0 {
			return c, true
		}
		return builder.ExitInfeasible, true
	case buildertest.Hang:
		return hang(spec), true
	}
	return 0, false
}

// hang never returns unless it fails to start the child the spec asks
// for: it optionally ignores SIGTERM and leaves a child in its process
// group, as a stuck training run might.
func hang(spec buildertest.Spec) int {
	if spec.IgnoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	if spec.ChildPIDFile != "" {
		self, err := os.Executable()
		if err != nil {
			return 1
		}
		child := exec.Command(self, "-child") // inherits our process group
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "trainscript:", err)
			return 1
		}
		_ = os.WriteFile(spec.ChildPIDFile, []byte(strconv.Itoa(child.Process.Pid)), 0o600)
	}
	fmt.Fprintln(os.Stderr, "trainscript: hanging")
	for {
		time.Sleep(time.Hour)
	}
}

// train "trains" for the spec's sleep, writes the quadratic's loss with
// the run's seeds and cost since start, and returns the exit code.
func train(job builder.JobFile, spec buildertest.Spec, resultPath string, start time.Time) int {
	time.Sleep(time.Duration(spec.SleepMS) * time.Millisecond)
	loss := buildertest.Quadratic(job.Task, job.Proposal, job.Seed)
	wall := time.Since(start).Seconds()
	r, err := json.Marshal(map[string]any{
		"loss":  loss,
		"seeds": []uint64{job.Seed},
		"cost":  map[string]float64{"wall_seconds": wall, "device_seconds": wall * float64(job.Slots)},
	})
	if err != nil {
		return 2
	}
	fmt.Fprintf(os.Stderr, "trainscript: loss %.6f\n", loss)
	return writeResult(resultPath, string(r))
}
