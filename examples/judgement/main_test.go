package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/cards"
	"github.com/lm2lm/lm2lm/records"
)

// task is a held-out task with one varying descriptor, width = w.
func task(id string, w float64) records.Task {
	return records.Task{ID: id, Family: "fam", Split: records.HeldOut, Metric: records.BitsPerByte, RefLoss: 1.5,
		SeedNoise: 0.01, Budget: 100, Description: "a judgement test task", Descriptors: map[string]float64{"width": w}}
}

// store writes records of (task, proposal, gain σ_e) to a new file store.
func store(t *testing.T, path string, rows []struct {
	t records.Task
	p records.Proposal
	g float64
}) {
	t.Helper()
	s, err := records.OpenFile(path, records.DefaultFileConfig())
	require.NoError(t, err)
	for i, r := range rows {
		require.NoError(t, s.Append(context.Background(), records.Record{Task: r.t, Proposal: r.p,
			Gain: r.g * r.t.SeedNoise, Loss: r.t.RefLoss - r.g*r.t.SeedNoise, Source: records.Real, Seeds: []uint64{uint64(i)}}))
	}
	require.NoError(t, s.Close())
}

// TestRunByHand: the landscape's one task (width 10) gains +3 σ_e from
// mechanism A and +1 from mechanism B, so A is its best of 2. The corpus
// task nearest to it (width 9) ranks A first (+2 against −1); the two far
// ones (widths 1000, 2000) rank B first (−3 against +2), and so does the
// corpus mean (A (2 − 3 − 3)/3 = −1.33, B (−1 + 2 + 2)/3 = +1): the
// nearest task ranks the best at 1, the corpus mean at 2.
func TestRunByHand(t *testing.T) {
	cat := lab.Catalogue()
	a, b := cards.Proposals(cat[0])[0], cards.Proposals(cat[1])[0]
	require.NotEqual(t, records.CanonicalName(a.Mechanism), records.CanonicalName(b.Mechanism))
	dir := t.TempDir()
	type row = struct {
		t records.Task
		p records.Proposal
		g float64
	}
	near, far1, far2, q := task("c/near", 9), task("c/far1", 1000), task("c/far2", 2000), task("l/q", 10)
	store(t, filepath.Join(dir, "corpus.records"), []row{{near, a, 2}, {near, b, -1}, {far1, a, -3}, {far1, b, 2}, {far2, a, -3}, {far2, b, 2}})
	store(t, filepath.Join(dir, "land.records"), []row{{q, a, 3}, {q, b, 1}})
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-corpus", filepath.Join(dir, "corpus.records"),
		"-landscape", filepath.Join(dir, "land.records"), "-k", "1"}, &out))
	full, top, ok := strings.Cut(out.String(), "The same, read from")
	require.True(t, ok, out.String())
	rank := func(table, name string) string {
		for _, l := range strings.Split(table, "\n") {
			if strings.HasPrefix(l, "| "+name+" |") {
				return strings.Fields(strings.TrimPrefix(l, "| "+name+" |"))[0]
			}
		}
		t.Fatalf("no row %q in\n%s", name, table)
		return ""
	}
	require.Equal(t, "2.0", rank(full, "corpus mean (3 tasks)"))
	require.Equal(t, "1.0", rank(full, "nearest 1 corpus tasks (NeighbourMean)"))
	require.Equal(t, "2.0", rank(full, "nearest 3 corpus tasks (NeighbourMean)"))
	// Read from the 1 best proposal: the nearest task's is A (A's share 1,
	// rank 1), the corpus mean's B (A's share 0 below B's 1: rank 2).
	require.Equal(t, "1.0", rank(top, "nearest 1 corpus tasks (NeighbourMean)"))
	require.Equal(t, "2.0", rank(top, "corpus mean (3 tasks)"))
}

// topShares splits the k best proposals' weight by mechanism, equal
// scores in key order.
func TestTopShares(t *testing.T) {
	mech := map[string]string{"a1": "A", "a2": "A", "b1": "B", "c1": "C"}
	score := map[string]float64{"a1": 3, "a2": 1, "b1": 2, "c1": 1, "unknown": 9}
	require.Equal(t, map[string]float64{"A": 0.5, "B": 0.5}, topShares(score, mech, 2))
	require.Equal(t, map[string]float64{"A": 2.0 / 3, "B": 1.0 / 3}, topShares(score, mech, 3), "a2 before c1 at equal scores")
	require.Equal(t, map[string]float64{"A": 0.5, "B": 0.25, "C": 0.25}, topShares(score, mech, 10))
}

func TestRunRefuses(t *testing.T) {
	dir := t.TempDir()
	q := task("q", 1)
	p := cards.Proposals(lab.Catalogue()[0])[0]
	type row = struct {
		t records.Task
		p records.Proposal
		g float64
	}
	store(t, filepath.Join(dir, "a.records"), []row{{q, p, 1}})
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "-corpus and -landscape name the two stores"},
		{[]string{"-corpus", "x", "-landscape", "y", "-suite", "v2"}, `-suite "v2": not a V3 split`},
		{[]string{"-corpus", filepath.Join(dir, "a.records"), "-landscape", filepath.Join(dir, "a.records")}, "task q is in both stores"},
	} {
		err := run(context.Background(), c.args, &bytes.Buffer{})
		require.ErrorContains(t, err, c.want)
	}
}
