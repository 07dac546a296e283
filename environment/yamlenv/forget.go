package yamlenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/lm2lm/lm2lm/records"
)

// Selection says which stored runs Forget forgets. A record is selected
// when it is of Task (any task when empty), of Version (any version when
// nil) and of a kind asked for: Failed (records.Failed), Infeasible (real
// or reference runs with Infeasible set), or every kind when neither is
// set. At least one of Failed, Infeasible, Task, Version and All must be
// set, so that nothing is forgotten by accident.
type Selection struct {
	Failed, Infeasible bool
	Task               string
	Version            *string
	All                bool
}

// ErrNoSelection: a Selection that selects nothing in particular.
var ErrNoSelection = errors.New("yamlenv: forget what? (failed, infeasible, a task, a version, or all)")

// Match reports whether s selects r.
func (s Selection) Match(r records.Record) bool {
	switch {
	case s.Task != "" && r.Task.ID != s.Task:
		return false
	case s.Version != nil && r.Version != *s.Version:
		return false
	case !s.Failed && !s.Infeasible:
		return true
	}
	return s.Failed && r.Source == records.Failed || s.Infeasible && r.Infeasible != ""
}

// ForgottenPath returns where Forget keeps what it takes out of the store
// at path: <name>.forgotten.jsonl beside it.
func ForgottenPath(path string) string {
	return strings.TrimSuffix(path, filepath.Ext(path)) + ".forgotten.jsonl"
}

// Forget takes the records s selects out of the store at path, so that the
// next stage that needs those runs pays for them again, and returns how
// many it took and kept. Nothing is lost: the forgotten records are first
// appended to ForgottenPath(path). The store is rewritten whole while its
// lock is held (a running verb holds it: Forget then fails with
// records.ErrLocked), into a new file that replaces the old one by rename.
func Forget(ctx context.Context, path string, s Selection) (forgot, kept int, err error) {
	if !s.Failed && !s.Infeasible && s.Task == "" && s.Version == nil && !s.All {
		return 0, 0, ErrNoSelection
	}
	old, err := records.OpenFile(path, records.DefaultFileConfig())
	if err != nil {
		return 0, 0, err
	}
	defer old.Close()
	all, err := old.Scan(ctx, records.Filter{})
	if err != nil {
		return 0, 0, err
	}
	var keep, drop []records.Record
	for _, r := range all {
		if s.Match(r) {
			drop = append(drop, r)
		} else {
			keep = append(keep, r)
		}
	}
	if len(drop) == 0 {
		return 0, len(keep), nil
	}
	if err := appendTo(ctx, ForgottenPath(path), drop); err != nil {
		return 0, 0, fmt.Errorf("yamlenv: forget: keep the forgotten records: %w", err)
	}
	tmp := path + ".rewrite"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, 0, err
	}
	if err := appendTo(ctx, tmp, keep); err != nil {
		return 0, 0, fmt.Errorf("yamlenv: forget: rewrite the store: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return 0, 0, fmt.Errorf("yamlenv: forget: %w", err)
	}
	if err := records.SyncDir(filepath.Dir(path)); err != nil {
		return 0, 0, fmt.Errorf("yamlenv: forget: %w", err)
	}
	return len(drop), len(keep), nil
}

// appendTo appends rs to the store at path, in batches.
func appendTo(ctx context.Context, path string, rs []records.Record) error {
	st, err := records.OpenFile(path, records.DefaultFileConfig())
	if err != nil {
		return err
	}
	const batch = 512
	for len(rs) > 0 {
		n := min(batch, len(rs))
		if err := st.Append(ctx, rs[:n]...); err != nil {
			st.Close()
			return err
		}
		rs = rs[n:]
	}
	return st.Close()
}
