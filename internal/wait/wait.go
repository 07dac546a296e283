// Package wait holds the one timer helper that the library's retry loops
// share. It does no I/O and is safe for concurrent use.
package wait

import (
	"context"
	"time"
)

// Sleep waits d or until ctx is done, whichever comes first, and returns
// ctx.Err() in the second case. A d ≤ 0 returns ctx.Err() at once.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
