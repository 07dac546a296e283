package progress_test

import (
	"log/slog"
	"os"
	"time"

	"github.com/lm2lm/lm2lm/progress"
)

// On a terminal New draws a bar; here the output is not one, so it logs
// plain lines (the time attribute is dropped to keep the output stable).
func Example() {
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r, _ := progress.New(os.Stdout, progress.Config{Title: "real runs", Total: 8, Logger: log,
		Now: func() time.Time { t = t.Add(time.Second); return t }})
	r.Reused(2) // two runs came from the store
	for range 6 {
		r.Done(1) // or wrap an executor: progress.Executor(pool, r)
	}
	r.Finish()
	// Output:
	// level=INFO msg=progress work="real runs" done=1 total=6 reused=2 elapsed=1s eta=5s
	// level=INFO msg=finished work="real runs" done=6 total=6 reused=2 elapsed=7s eta=0s
}
