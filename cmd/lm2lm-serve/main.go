// Command lm2lm-serve runs LM2LM's environment service (package serve)
// over the embedded lab: an outside RL trainer (TRL, verl, OpenRLHF)
// samples completions from its LLM policy and gets rewards from the
// embedded world model, with calibration runs on real tiny-LM trainings.
// See docs/service.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servelab"
)

const usage = `lm2lm-serve: the LM2LM environment service for RL trainers (TRL, verl, OpenRLHF).

It hands out research states as chat prompts (a dataset file or a JSON API),
scores groups of completions with the embedded world model (parse, predict,
shape, group-relative advantages, dynamic sampling), counts the trainer's
steps and runs the calibration points as real tiny-LM trainings on the
embedded lab, evaluates proposals on held-out states with real runs, and
reports the reliability monitors and Prometheus metrics.

Routes: GET /v1/info, POST /v1/states, POST /v1/dataset, POST /v1/score,
POST /v1/advance, POST /v1/evaluate, GET /v1/monitors, POST /get_reward
(OpenRLHF), GET /metrics. State lives in -dir: a killed service restarted
on the same -dir and -store resumes with nothing lost and no run paid twice.

It binds loopback by default; any other -addr needs a bearer token
(-token or LM2LM_SERVE_TOKEN). See docs/service.md for each framework's
configuration.

Usage: lm2lm-serve [flags]
`

type options struct {
	addr, token, dir, store string
	train, test, m0         int
	seed                    uint64
	parallel                int
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("lm2lm-serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen address; a non-loopback address needs -token")
	fs.StringVar(&o.token, "token", os.Getenv("LM2LM_SERVE_TOKEN"), "bearer token every request must carry (default $LM2LM_SERVE_TOKEN)")
	fs.StringVar(&o.dir, "dir", "out/serve", "state directory (checkpoint and journal)")
	fs.StringVar(&o.store, "store", "out/serve-records.jsonl", "records store of every real run (reference runs, M_0, calibrations, evaluations)")
	fs.IntVar(&o.train, "train", 1, "training tasks per family of the lab's V2 suite")
	fs.IntVar(&o.test, "test", 1, "held-out tasks per family")
	fs.IntVar(&o.m0, "m0", 8, "initial real records M_0 (catalogue proposals drawn uniformly)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the loop and of M_0's draws")
	fs.IntVar(&o.parallel, "parallel", 2, "concurrent world-model calls and real runs")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lm2lm-serve:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "lm2lm-serve:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, w io.Writer) error {
	cfg := serve.DefaultConfig()
	cfg.Addr, cfg.Token, cfg.Dir, cfg.Parallel = o.addr, o.token, o.dir, o.parallel
	cfg.Loop.Seed = o.seed
	// Check the bind before the lab's minutes of reference runs.
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(o.store), 0o700); err != nil {
		return err
	}
	store, err := records.OpenFile(o.store, records.DefaultFileConfig())
	if err != nil {
		return err
	}
	defer store.Close()
	c, _, err := servelab.Components(ctx, servelab.Config{Train: o.train, Test: o.test, M0: o.m0, Seed: o.seed, Parallel: o.parallel}, store, w)
	if err != nil {
		return err
	}
	s, err := serve.New(cfg, c)
	if err != nil {
		return err
	}
	defer s.Close()
	if rep, err := s.Resume(ctx); err != nil {
		return fmt.Errorf("resume the calibration in flight: %w", err)
	} else if rep != nil {
		fmt.Fprintf(w, "resumed the calibration at step %d: %d runs\n", rep.Step, rep.Executed)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	in := s.Info()
	fmt.Fprintf(w, "serving %s on http://%s (step %d, %d calibrations, M %d records)\n", serve.APIVersion, ln.Addr(), in.Step, in.Calibrations, in.Evidence)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	case err := <-errc:
		return err
	}
}
