package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/setting"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// The command on a small corpus (one task per family, the catalogue's
// first proposals) writes a prior that a second invocation on the same
// store refits byte for byte without running anything, and that the
// records in another order fit to the same bytes too.
func TestRegeneratesBitIdentical(t *testing.T) {
	if testing.Short() {
		t.Skip("trains about 40 tiny models")
	}
	dir := t.TempDir()
	o := options{perFamily: 1, seeds: 2, parallel: 2, store: filepath.Join(dir, "c.records"), out: filepath.Join(dir, "a.prior"), maxProposals: 3, ridge: defaultRidge, clip: defaultClip}
	var out, log bytes.Buffer
	require.NoError(t, run(context.Background(), &out, &log, o))
	first, err := os.ReadFile(o.out)
	require.NoError(t, err)
	require.Contains(t, out.String(), "corpus: 4 tasks,")
	o.out = filepath.Join(dir, "b.prior")
	log.Reset()
	require.NoError(t, run(context.Background(), &out, &log, o))
	require.Contains(t, log.String(), "running 0 of ")
	second, err := os.ReadFile(o.out)
	require.NoError(t, err)
	require.Equal(t, first, second)

	st, err := records.OpenFile(o.store, records.DefaultFileConfig())
	require.NoError(t, err)
	rs, err := st.Scan(context.Background(), records.Filter{})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	l, err := PriorLab(1, 1, records.NewMemStore())
	require.NoError(t, err)
	slices.Reverse(rs)
	p, third, err := fit(context.Background(), l, rs, defaultRidge, defaultClip)
	require.NoError(t, err)
	require.Equal(t, first, third)
	require.Equal(t, 4, p.Corpus().Tasks)
	runs := 0
	for _, r := range rs {
		if !r.Proposal.IsNoChange() {
			runs++
		}
	}
	require.Equal(t, runs, p.Corpus().Records, "the reference runs are left out")
}

// A store holding a run of a split's task is refused: the corpus never
// holds a training, validation or test task.
func TestFitRefusesSplitTasks(t *testing.T) {
	l, err := PriorLab(1, 1, records.NewMemStore())
	require.NoError(t, err)
	for _, id := range []string{lab.SuiteV2(lab.DefaultSuiteSeed).Train[0].ID, lab.SuiteV2(lab.DefaultSuiteSeed).Validation[0].ID, lab.V3Val().Tasks[0].ID} {
		_, _, err := fit(context.Background(), l, []records.Record{{Task: records.Task{ID: id}, Source: records.Real}}, defaultRidge, 0)
		require.ErrorIs(t, err, lab.ErrNotPretrain, id)
		require.Contains(t, err.Error(), id)
	}
}

// The committed prior file reads, fits the validated setting's world
// configuration over PriorLab with the default corpus, and describes the
// default corpus; it loads over another corpus size too (the lab's
// effects do not depend on its task list), not without the lab's effects.
func TestCommittedPrior(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "lab", "prior", "v2.prior"))
	require.NoError(t, err)
	p, err := rwm.ReadPrior(b)
	require.NoError(t, err)
	again, err := p.MarshalBinary()
	require.NoError(t, err)
	require.Equal(t, b, again)
	l, err := PriorLab(defaultPerFamily, 1, records.NewMemStore())
	require.NoError(t, err)
	_, err = p.Config(setting.Validated().WorldConfig(l))
	require.NoError(t, err)
	// 24 tasks per family, less v2-pretrain/in-distribution/ar-code/03,
	// whose reference run diverges (the lab leaves it out).
	require.Equal(t, defaultPerFamily*len(lab.V2Families)-1, p.Corpus().Tasks)
	require.Equal(t, 16610, p.Corpus().Records)
	require.Equal(t, float64(defaultRidge), p.Corpus().Ridge)
	require.Equal(t, float64(defaultClip), p.Corpus().Clip)
	other, err := PriorLab(defaultPerFamily-1, 1, records.NewMemStore())
	require.NoError(t, err)
	_, err = p.Config(setting.Validated().WorldConfig(other))
	require.NoError(t, err, "the lab's effects do not depend on its task list")
	_, err = p.Config(setting.Library().WorldConfig(other))
	require.ErrorIs(t, err, rwm.ErrPriorMismatch, "a world model without the lab's effects")
	for _, name := range p.Names() {
		require.False(t, strings.Contains(name, "v2s1/"), "a feature names a split's task: %s", name)
	}
}
