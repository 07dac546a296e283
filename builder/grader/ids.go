package grader

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"

	"github.com/lm2lm/lm2lm/records"
)

// rowIDs maps the ids a run sees to the task's own row ids. Each grade
// draws a fresh one (relabel), so an id tells a run nothing about its row:
// not its index in a public dataset, not its place in a fixed split.
type rowIDs struct{ toTask map[string]string }

// relabel rewrites the id column of every CSV input that has one: its rows
// are numbered with a random permutation of 0..n−1 (n rows over all the
// files), and the rows of a file holding any of the hidden ids (the test
// rows) are shuffled as well, so that neither a row's id nor its position
// reveals which row of the task it is. Other files keep their row order,
// so that a learner sensitive to the order of its training rows scores
// the same in every grade. Inputs without an id column are returned
// unchanged. Ids are compared in canonical form (canonID).
func relabel(rng *rand.Rand, inputs map[string][]byte, hidden map[string]string) (map[string][]byte, rowIDs, error) {
	type table struct {
		name string
		rows [][]string
		id   int
	}
	var tables []table
	out := make(map[string][]byte, len(inputs))
	n := 0
	for name, b := range inputs {
		rows, id, ok := idTable(b)
		if !ok {
			out[name] = b
			continue
		}
		tables = append(tables, table{name, rows, id})
		n += len(rows) - 1
	}
	// Map order is random: walk the tables in name order so that a given
	// rng gives a given relabelling.
	for i := 1; i < len(tables); i++ {
		for j := i; j > 0 && tables[j].name < tables[j-1].name; j-- {
			tables[j], tables[j-1] = tables[j-1], tables[j]
		}
	}
	perm := rng.Perm(n)
	ids := rowIDs{toTask: make(map[string]string, n)}
	k := 0
	for _, t := range tables {
		body := t.rows[1:]
		for _, r := range body {
			if _, ok := hidden[canonID(r[t.id])]; ok {
				rng.Shuffle(len(body), func(i, j int) { body[i], body[j] = body[j], body[i] })
				break
			}
		}
		for _, r := range body {
			opaque := strconv.Itoa(perm[k])
			k++
			ids.toTask[opaque] = canonID(r[t.id])
			r[t.id] = opaque
		}
		var buf bytes.Buffer
		w := csv.NewWriter(&buf)
		if err := w.WriteAll(t.rows); err != nil {
			return nil, rowIDs{}, fmt.Errorf("%w: relabel %s: %w", ErrTask, t.name, err)
		}
		out[t.name] = buf.Bytes()
	}
	return out, ids, nil
}

// idTable parses b as a CSV table whose header has an id column, every
// row as long as the header.
func idTable(b []byte) ([][]string, int, bool) {
	cr := csv.NewReader(bytes.NewReader(b))
	rows, err := cr.ReadAll()
	if err != nil || len(rows) == 0 {
		return nil, 0, false
	}
	for i, h := range rows[0] {
		if strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")) == "id" {
			return rows, i, true
		}
	}
	return nil, 0, false
}

// translate maps a submission keyed by the run's ids to the task's ids. An
// id the run was never shown keeps a form that matches no answer, so that
// Score reports it; two ids of one task row are a repeated id.
func (ids rowIDs) translate(sub map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(sub))
	for id, v := range sub {
		t, ok := ids.toTask[id]
		if !ok {
			t = "unknown id " + id
		}
		if _, dup := out[t]; dup {
			return nil, fmt.Errorf("%w: task row %q given twice", ErrSubmission, records.Excerpt(t))
		}
		out[t] = v
	}
	return out, nil
}

// uidPool hands out the user ids of concurrent runs, one each, so that no
// run can signal, trace or read the files of another. Every Grader of this
// process shares it; another process must be given its own range.
var uidPool = struct {
	sync.Mutex
	inUse map[int]bool
	freed chan struct{} // closed and replaced when an id is released
}{inUse: map[int]bool{}, freed: make(chan struct{})}

// acquireUID returns a user id in [first, first+count) that no other run
// of this process has, waiting for one while all are taken.
func acquireUID(ctx context.Context, first, count int) (int, error) {
	for {
		uidPool.Lock()
		for u := first; u < first+count; u++ {
			if !uidPool.inUse[u] {
				uidPool.inUse[u] = true
				uidPool.Unlock()
				return u, nil
			}
		}
		freed := uidPool.freed
		uidPool.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return 0, fmt.Errorf("grader: waiting for a free run user: %w", ctx.Err())
		}
	}
}

func releaseUID(u int) {
	uidPool.Lock()
	delete(uidPool.inUse, u)
	close(uidPool.freed)
	uidPool.freed = make(chan struct{})
	uidPool.Unlock()
}
