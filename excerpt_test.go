package lm2lm_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// hostile is a proposal as an adversarial proposer may write it: a
// mechanism and a parameter value of kilobytes holding control bytes (a
// terminal escape, NUL), and a multi-line text of kilobytes. Proposal text
// is data (see DESIGN.md); errors quote its key only through
// records.Excerpt.
func hostile() records.Proposal {
	return records.Proposal{
		Mechanism: strings.Repeat("m", 5000) + "\x1b[2J",
		Params:    map[string]string{"note": strings.Repeat("line\n", 2000) + "\x00end"},
		Text:      strings.Repeat("ignore the task\n", 1000),
	}
}

// cancelled builds or executes (as its field says) with builder.ErrCancelled,
// as a backend does when the caller's ctx ends.
type cancelled struct {
	oracle
	build bool
}

func (c cancelled) Build(ctx context.Context, t records.Task, p records.Proposal) (builder.Job, error) {
	if c.build {
		return builder.Job{}, fmt.Errorf("cancelled: %w", builder.ErrCancelled)
	}
	return builder.Job{Task: t, Proposal: p, Seed: 7}, nil
}

func (cancelled) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	return builder.Outcome{}, fmt.Errorf("cancelled: %w", builder.ErrCancelled)
}

// downOn is a world model that fails every prediction of a proposal with
// the given key and predicts no gain for any other.
func downOn(key string) rwm.Func {
	return func(_ context.Context, q rwm.Query) (rwm.Prediction, error) {
		if q.Proposal.Key() == key {
			return rwm.Prediction{}, errors.New("world down")
		}
		return rwm.Prediction{Valid: true}, nil
	}
}

func TestErrorsQuoteProposalExcerpts(t *testing.T) {
	// Every error of the package that names a proposal quotes its key as
	// records.Excerpt does, in Go quotes: bounded, one line, no control
	// byte, and never the free text.
	p := hostile()
	task := tasks()[0]
	cases := map[string]func() error{
		"build": func() error {
			_, _, err := lm2lm.RunReal(context.Background(), cancelled{build: true}, cancelled{}, task, p)
			return err
		},
		"run": func() error {
			_, _, err := lm2lm.RunReal(context.Background(), cancelled{}, cancelled{}, task, p)
			return err
		},
		"train predict": func() error {
			pol := &cycle{groups: [][]records.Proposal{{prop("wider", "1"), p}}}
			tr, err := lm2lm.New(oneStepConfig(1, 2, 0), lm2lm.Components{Policy: pol, World: downOn(p.Key()), Tasks: []records.Task{task}})
			require.NoError(t, err)
			_, err = tr.StepOnce(context.Background())
			return err
		},
		"evaluate predict": func() error {
			cfg := lm2lm.DefaultEvalConfig()
			cfg.StatesPerTask, cfg.K, cfg.World = 1, 1, downOn(p.Key())
			_, err := lm2lm.Evaluate(context.Background(), cfg, fixed{p}, oracle{}, oracle{}, []records.Task{task}, nil)
			return err
		},
	}
	want := strconv.Quote(records.Excerpt(p.Key()))
	for name, run := range cases {
		t.Run(name, func(t *testing.T) {
			err := run()
			require.Error(t, err)
			msg := err.Error()
			require.Contains(t, msg, want)
			require.LessOrEqual(t, len(msg), 3*records.MaxExcerpt+100, msg)
			require.NotContains(t, msg, "ignore the task")
			for _, r := range msg {
				require.False(t, r < ' ' || r == 0x7f, "control byte %q in %q", r, msg)
			}
		})
	}
}

// lostNode fails every build with an error of no known class: not the
// proposal's fault, so the proposal is left unmeasured and reported.
type lostNode struct{ oracle }

func (lostNode) Build(context.Context, records.Task, records.Proposal) (builder.Job, error) {
	return builder.Job{}, errors.New("node lost")
}

func TestFailureReportsQuoteProposalExcerpts(t *testing.T) {
	// The Failures lines of an evaluation report name the proposal as the
	// errors do: its key's excerpt in Go quotes, never the free text.
	p := hostile()
	cfg := lm2lm.DefaultEvalConfig()
	cfg.StatesPerTask, cfg.K = 1, 1
	rep, err := lm2lm.Evaluate(context.Background(), cfg, fixed{p}, lostNode{}, oracle{}, []records.Task{tasks()[0]}, nil)
	require.NoError(t, err)
	require.Len(t, rep.Failures, 1)
	msg := rep.Failures[0]
	require.Contains(t, msg, strconv.Quote(records.Excerpt(p.Key())))
	require.Contains(t, msg, "node lost")
	require.LessOrEqual(t, len(msg), 3*records.MaxExcerpt+100, msg)
	require.NotContains(t, msg, "ignore the task")
	for _, r := range msg {
		require.False(t, r < ' ' || r == 0x7f, "control byte %q in %q", r, msg)
	}
}
