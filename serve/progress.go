package serve

import (
	"context"
	"log/slog"
	"time"
)

// LogProgress logs the service's progress to log every interval until ctx
// is done: a line when scoring moved (the step, groups scored and failed,
// score requests, real runs) and a line for each calibration point whose
// state changed (its step, runs, state and error). An unchanged service
// logs nothing. It blocks; the caller owns the goroutine it runs in.
func (s *Service) LogProgress(ctx context.Context, log *slog.Logger, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last Info
	seen := map[int]string{} // calibration point → its last logged state
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		in := s.Info()
		if in.Step != last.Step || in.Scored != last.Scored || in.Failed != last.Failed || in.RealRuns != last.RealRuns {
			log.Info("serve: scoring", "step", in.Step, "scored_groups", in.Scored, "failed_groups", in.Failed,
				"score_requests", in.Requests, "real_runs", in.RealRuns, "reused_runs", in.Reused, "evidence", in.Evidence)
			last = in
		}
		for _, c := range s.Calibrations().Calibrations {
			if seen[c.Point] == c.State+c.Error {
				continue
			}
			seen[c.Point] = c.State + c.Error
			attrs := []any{"point", c.Point, "step", c.Step, "budget", c.Budget, "runs", c.Runs, "state", c.State}
			if c.Error != "" {
				log.Warn("serve: calibration", append(attrs, "error", c.Error)...)
				continue
			}
			log.Info("serve: calibration", attrs...)
		}
	}
}
