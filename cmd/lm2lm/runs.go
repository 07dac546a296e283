package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/lm2lm/lm2lm/envconfig"
	"github.com/lm2lm/lm2lm/records"
)

// runStatus is how the runs verb names a stored run's outcome.
func runStatus(r records.Record) string {
	switch {
	case r.Source == records.Failed:
		return "failed"
	case r.Infeasible != "":
		return "infeasible"
	case r.Source == records.Reference:
		return "reference"
	}
	return "ok"
}

// runsVerb prints every run of the store, in the order they were stored:
// task, change, seed, status, loss, gain (b_e − ℓ, and in σ_e units), the
// training code's version, and the log; -task and -status select.
func runsVerb(ctx context.Context, cfg envconfig.Config, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lm2lm runs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	task := fs.String("task", "", "runs of this task only")
	status := fs.String("status", "", "runs of this status only: ok, reference, infeasible or failed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr(stderr, "runs: unexpected arguments %q", fs.Args())
	}
	store, err := records.OpenFile(cfg.Store, records.FileConfig{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("lm2lm: runs reads %s: %w", cfg.Store, err)
	}
	defer store.Close()
	all, err := store.Scan(ctx, records.Filter{TaskID: *task})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "task\tchange\tseed\tstatus\tloss\tgain\tgain σ_e\tversion\tlog")
	n := 0
	for _, r := range all {
		st := runStatus(r)
		if (r.Source != records.Real && r.Source != records.Reference && r.Source != records.Failed) || (*status != "" && st != *status) {
			continue
		}
		loss, gain, sig := "–", "–", "–"
		if st == "ok" || st == "reference" {
			loss, gain = fmt.Sprintf("%.6g", r.Loss), fmt.Sprintf("%+.4g", r.Gain)
			if st == "ok" && r.Task.SeedNoise > 0 {
				sig = fmt.Sprintf("%+.2f", r.Gain/r.Task.SeedNoise)
			}
		}
		log := r.LogFile
		if why := firstNonEmpty(r.Failure, r.Infeasible); why != "" {
			log = strings.TrimSpace(log + " (" + records.Excerpt(why) + ")")
		}
		seeds := strings.Trim(fmt.Sprint(r.Seeds), "[]")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Task.ID, r.Proposal.Key(), seeds, st, loss, gain, sig, r.Version, log)
		n++
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d runs in %s\n", n, cfg.Store)
	return nil
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}
