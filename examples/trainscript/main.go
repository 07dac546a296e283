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

func run(jobPath, resultPath string) int {
	b, err := os.ReadFile(jobPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "trainscript:", err)
		return builder.ExitTransient
	}
	var job builder.JobFile
	if err := json.Unmarshal(b, &job); err != nil || job.Protocol != builder.ProtocolVersion {
		fmt.Fprintf(os.Stderr, "trainscript: bad job file (protocol %d): %v\n", job.Protocol, err)
		return 2
	}
	spec, err := buildertest.ParseSpec(job.Spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "trainscript:", err)
		return 2
	}
	fmt.Fprintf(os.Stderr, "trainscript: task %s proposal %s seed %d budget %d behaviour %q\n",
		job.Task.ID, job.Key, job.Seed, job.Budget, spec.Behaviour)
	fmt.Fprintln(os.Stderr, buildertest.TextLine(job.Proposal.Text))

	write := func(s string) int {
		if err := os.WriteFile(resultPath, []byte(s), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "trainscript:", err)
			return builder.ExitTransient
		}
		return 0
	}
	start := time.Now()
	switch spec.Behaviour {
	case buildertest.Crash:
		fmt.Fprintln(os.Stderr, "trainscript: segmentation fault (simulated)")
		return 1
	case buildertest.Transient:
		fmt.Fprintln(os.Stderr, "trainscript: no device available")
		return builder.ExitTransient
	case buildertest.Garbage:
		fmt.Println("loss is about 1.2, I think")
		return write("this is not JSON {")
	case buildertest.NaN:
		return write(`{"loss": NaN}`)
	case buildertest.Infeasible:
		r, _ := json.Marshal(map[string]string{"infeasible": spec.Reason})
		if c := write(string(r)); c != 0 {
			return c
		}
		return builder.ExitInfeasible
	case buildertest.Hang:
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
	return write(string(r))
}
