package progress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/lm2lm/lm2lm/builder"
)

// ErrConfig reports a bad Config.
var ErrConfig = errors.New("progress: bad config")

// Mode chooses how progress is shown.
type Mode int

const (
	// Auto draws a bar when the writer is a terminal, else logs lines.
	Auto Mode = iota
	// Bar always draws a bar (carriage returns, one line).
	Bar
	// Lines always logs plain lines through log/slog.
	Lines
)

// Config parameterises a Reporter.
type Config struct {
	// Title names the work ("evaluation", "comparison runs").
	Title string
	// Total is the number of units expected (runs); ≥ 0, may grow (Grow).
	Total int
	// Mode is Auto (default), Bar or Lines.
	Mode Mode
	// Every is the least time between two plain lines; default 10 s
	// (library choice: a long job says something every few seconds without
	// flooding a log file). Lines also appear at the first unit and at
	// Finish.
	Every time.Duration
	// Logger receives the plain lines; nil = a text logger on the writer.
	Logger *slog.Logger
	// Now is the clock; nil = time.Now. Tests inject it.
	Now func() time.Time
}

// Validate reports the first problem with c, wrapping ErrConfig.
func (c Config) Validate() error {
	switch {
	case c.Total < 0:
		return fmt.Errorf("%w: Total = %d, want ≥ 0", ErrConfig, c.Total)
	case c.Mode < Auto || c.Mode > Lines:
		return fmt.Errorf("%w: Mode = %d, want Auto, Bar or Lines", ErrConfig, c.Mode)
	case c.Every < 0:
		return fmt.Errorf("%w: Every = %v, want ≥ 0", ErrConfig, c.Every)
	}
	return nil
}

// State is a snapshot of the progress.
type State struct {
	// Done counts the units finished with work paid for; Reused the units
	// served without work (a stored run), which leave the total.
	Done, Reused int
	// Total is the units still expected to be paid for, done included.
	Total int
	// Elapsed is the time since the Reporter started; ETA the estimated
	// time left, Elapsed/Done × (Total − Done), 0 before the first unit.
	Elapsed, ETA time.Duration
}

// Reporter shows the progress of long work counted in units (real runs,
// say): done / total and the estimated time left, as a bar on a terminal
// or as periodic log lines elsewhere. It starts no goroutine and is safe
// for concurrent use.
type Reporter struct {
	mu                  sync.Mutex
	cfg                 Config
	bar                 *progressbar.ProgressBar
	log                 *slog.Logger
	done, reused, total int
	start, last         time.Time
	finished            bool
}

// New returns a Reporter that writes to w.
func New(w io.Writer, cfg Config) (*Reporter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Every == 0 {
		cfg.Every = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Reporter{cfg: cfg, total: cfg.Total, start: cfg.Now()}
	if cfg.Mode == Bar || (cfg.Mode == Auto && IsTerminal(w)) {
		r.bar = progressbar.NewOptions(cfg.Total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(cfg.Title),
			progressbar.OptionSetItsString("runs"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(30),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }))
		return r, nil
	}
	r.log = cfg.Logger
	if r.log == nil {
		r.log = slog.New(slog.NewTextHandler(w, nil))
	}
	return r, nil
}

// IsTerminal reports whether w is a terminal (an *os.File on a tty).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Grow adds n units to the total.
func (r *Reporter) Grow(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total += n
	if r.bar != nil {
		r.bar.ChangeMax(r.total)
	}
}

// Done records n finished units.
func (r *Reporter) Done(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done += n
	r.total = max(r.total, r.done)
	if r.bar != nil {
		r.bar.ChangeMax(r.total)
		_ = r.bar.Add(n) // writes to the caller's writer; a failed write only loses a frame
		return
	}
	now := r.cfg.Now()
	if r.done == n || now.Sub(r.last) >= r.cfg.Every {
		r.line(now, "progress")
	}
}

// Reused records n units served without work: they leave the total, so the
// bar and the ETA count only work that is paid for.
func (r *Reporter) Reused(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reused += n
	r.total = max(r.total-n, r.done)
	if r.bar != nil {
		r.bar.ChangeMax(r.total)
		r.bar.Describe(fmt.Sprintf("%s (%d reused)", r.cfg.Title, r.reused))
	}
}

// Finish ends the display: the bar's last frame or a final line. Later
// calls do nothing.
func (r *Reporter) Finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished {
		return
	}
	r.finished = true
	if r.bar != nil {
		r.bar.ChangeMax(r.done)
		_ = r.bar.Finish()
		return
	}
	r.line(r.cfg.Now(), "finished")
}

// State returns the current progress.
func (r *Reporter) State() State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state(r.cfg.Now())
}

func (r *Reporter) state(now time.Time) State {
	s := State{Done: r.done, Reused: r.reused, Total: r.total, Elapsed: now.Sub(r.start)}
	if r.done > 0 {
		s.ETA = time.Duration(float64(s.Elapsed) / float64(r.done) * float64(r.total-r.done))
	}
	return s
}

// line logs one plain line; r.mu is held.
func (r *Reporter) line(now time.Time, msg string) {
	r.last = now
	s := r.state(now)
	r.log.Info(msg, "work", r.cfg.Title, "done", s.Done, "total", s.Total, "reused", s.Reused,
		"elapsed", s.Elapsed.Round(time.Second), "eta", s.ETA.Round(time.Second))
}

// Executor wraps e so that every finished Execute is reported to r: a
// reused outcome (builder.Outcome.Reused) as Reused, anything else,
// failures included, as Done. Drivers put it between their pool and the
// trainer or the evaluation.
func Executor(e builder.Executor, r *Reporter) builder.Executor {
	return counting{e, r}
}

type counting struct {
	e builder.Executor
	r *Reporter
}

func (c counting) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	out, err := c.e.Execute(ctx, j)
	if err == nil && out.Reused {
		c.r.Reused(1)
	} else if ctx.Err() == nil {
		c.r.Done(1)
	}
	return out, err
}
