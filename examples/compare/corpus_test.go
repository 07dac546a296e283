package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/records"
)

// corpusRecords are n real runs of catalogue changes on one task of ID id
// (σ_e 0.05, b_e 2), gains 0.1·(i−1), and the task's reference run.
func corpusRecords(t *testing.T, id string, n int) []records.Record {
	t.Helper()
	task := records.Task{ID: id, Family: "ar-prose", Split: records.Train, Metric: records.BitsPerByte, RefLoss: 2, SeedNoise: 0.05,
		Descriptors: map[string]float64{lab.DescLog10Budget: 9}}
	out := []records.Record{{Task: task, Proposal: records.Proposal{Mechanism: records.NoChange}, Loss: 2, Source: records.Reference, Seeds: []uint64{1}, Time: time.Unix(1, 0).UTC()}}
	for i, c := range records.DrawChanges(rand.New(rand.NewPCG(1, 2)), []records.Task{task}, lab.Catalogue(), n, nil) {
		g := 0.1 * float64(i-1)
		out = append(out, records.Record{Task: task, Proposal: c.Proposal, Gain: g, Loss: 2 - g, Source: records.Real, Seeds: []uint64{1}, Time: time.Unix(2, 0).UTC()})
	}
	return out
}

// writeStore writes rs to a new file store at dir/name and returns its path.
func writeStore(t *testing.T, dir, name string, rs []records.Record) string {
	t.Helper()
	path := filepath.Join(dir, name)
	st, err := records.OpenFile(path, records.DefaultFileConfig())
	require.NoError(t, err)
	if len(rs) > 0 {
		require.NoError(t, st.Append(context.Background(), rs...))
	}
	require.NoError(t, st.Close())
	return path
}

// The corpus methods need -corpus and -corpus needs one of them; neither
// runs by default.
func TestCorpusFlags(t *testing.T) {
	_, err := parseFlags([]string{"-methods", "bestknown-corpus"}, &bytes.Buffer{})
	require.ErrorIs(t, err, errUsage)
	require.ErrorContains(t, err, "-corpus FILE names its store")
	_, err = parseFlags([]string{"-corpus", "x.records"}, &bytes.Buffer{})
	require.ErrorContains(t, err, `-corpus "x.records": no method of -methods draws on it`)
	o, err := parseFlags([]string{"-methods", "rft,rft-corpus,bestknown-corpus", "-corpus", "c.records"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, "c.records", o.corpus)
	require.NotContains(t, defaultMethods(), "rft-corpus")
	require.NotContains(t, defaultMethods(), "bestknown-corpus")
	// Each corpus method sits beside its M'₀ version, and the command
	// names the corpus without moving the run directory.
	names := methodNames()
	require.Equal(t, []string{"rft", "rft-corpus", "bestknown", "bestknown-corpus"}, names[2:6])
	require.True(t, methods["bestknown-corpus"].extra, "M'₀ as bestknown's")
	require.Contains(t, command(o), " -corpus c.records")
	o.corpus = ""
	o.methods = []string{"rft"}
	require.Equal(t, runDir(o), runDir(options{methods: []string{"rft"}, profile: o.profile, suite: o.suite, out: o.out, probe: o.probe, setting: o.setting}))
}

// loadCorpus keeps the corpus's real proposal runs, leaves the reference
// runs out, and refuses a store with a task outside the corpus or with no
// proposal run.
func TestLoadCorpus(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	rs := corpusRecords(t, lab.PretrainName+"/in-distribution/ar-prose/00", 5)
	ev, err := loadCorpus(ctx, writeStore(t, dir, "corpus.records", rs))
	require.NoError(t, err)
	require.Equal(t, 5, ev.Len())
	require.Equal(t, []string{lab.PretrainName + "/in-distribution/ar-prose/00"}, corpusTasks(ev))
	for i := range ev.Len() {
		require.False(t, ev.At(i).Proposal.IsNoChange())
	}

	split := append(rs, corpusRecords(t, "v2s1/train/ar-prose/00", 2)...)
	_, err = loadCorpus(ctx, writeStore(t, dir, "split.records", split))
	require.ErrorIs(t, err, lab.ErrNotPretrain)
	require.ErrorContains(t, err, `"v2s1/train/ar-prose/00"`)

	_, err = loadCorpus(ctx, writeStore(t, dir, "refs.records", rs[:1]))
	require.ErrorContains(t, err, "no proposal run")
	_, err = loadCorpus(ctx, filepath.Join(dir, "absent.records"))
	require.Error(t, err)

	m0, err := records.NewEvidence(corpusRecords(t, "v1/train/ar-prose/00", 2)[1:]...)
	require.NoError(t, err)
	both, err := withCorpus(m0, ev)
	require.NoError(t, err)
	require.Equal(t, 7, both.Len())
	require.Equal(t, m0.At(0).Task.ID, both.At(0).Task.ID, "M'_0 first")
	require.Equal(t, 2, m0.Len(), "M'_0 itself unchanged")
}

// A corpus method's result file records the corpus it drew on; read back
// under another corpus it is refused, and a method that draws on none
// records none.
func TestCorpusResultIsChecked(t *testing.T) {
	dir := t.TempDir()
	ev, err := loadCorpus(context.Background(), writeStore(t, t.TempDir(), "c.records", corpusRecords(t, lab.PretrainName+"/in-distribution/ar-prose/00", 4)))
	require.NoError(t, err)
	o := options{profile: "short", suite: "v2-val", corpus: "c.records", corpusEv: ev}
	r := testResult(o, "rft-corpus", 1)
	r.Corpus, r.CorpusRuns = ev.Fingerprint(), ev.Len()
	require.NoError(t, writeResult(dir, job{"rft-corpus", 1}, r))
	got, ok, err := readResult(dir, job{"rft-corpus", 1}, o)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 4, got.CorpusRuns)

	other, err := loadCorpus(context.Background(), writeStore(t, t.TempDir(), "c.records", corpusRecords(t, lab.PretrainName+"/in-distribution/ar-prose/00", 3)))
	require.NoError(t, err)
	o.corpusEv = other
	_, ok, err = readResult(dir, job{"rft-corpus", 1}, o)
	require.ErrorContains(t, err, "drew on another pretraining corpus")
	require.False(t, ok)

	plain := testResult(o, "rft", 1)
	plain.Corpus = ev.Fingerprint()
	require.NoError(t, writeResult(dir, job{"rft", 1}, plain))
	_, _, err = readResult(dir, job{"rft", 1}, o)
	require.ErrorContains(t, err, "drew on another pretraining corpus", "rft draws on no corpus")
}

// The corpus methods on the real lab (tiny profile): they pay what their
// M'₀ versions pay, record the corpus, and a second invocation reads them
// back.
func TestCorpusMethodsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("trains tiny models; runs without -short")
	}
	corpus := writeStore(t, t.TempDir(), "c.records", corpusRecords(t, lab.PretrainName+"/in-distribution/ar-prose/00", 12))
	o := options{methods: []string{"rft", "rft-corpus", "bestknown", "bestknown-corpus"}, seeds: 1, firstSeed: 1, profile: "tiny", suite: "v1", probe: 2,
		out: t.TempDir(), progress: "lines", parallel: 2, resamples: 200, specs: tinyTasks(), corpus: corpus}
	var first bytes.Buffer
	require.NoError(t, run(context.Background(), &first, o))
	require.Contains(t, first.String(), "corpus: 12 real proposal runs of 1 tasks from "+corpus)
	dir := runDir(o)
	var err error
	o.corpusEv, err = loadCorpus(context.Background(), corpus) // as run loads it
	require.NoError(t, err)
	for _, pair := range [][2]string{{"rft", "rft-corpus"}, {"bestknown", "bestknown-corpus"}} {
		plain, ok, err := readResult(dir, job{pair[0], 1}, o)
		require.NoError(t, err)
		require.True(t, ok)
		withC, ok, err := readResult(dir, job{pair[1], 1}, o)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, plain.Budget(), withC.Budget(), "the corpus is in no budget: %s", pair[1])
		require.Equal(t, plain.M0, withC.M0)
		require.Empty(t, plain.Corpus)
		require.Equal(t, 12, withC.CorpusRuns)
		require.NotEmpty(t, withC.Corpus)
	}
	var second bytes.Buffer
	require.NoError(t, run(context.Background(), &second, o))
	require.Contains(t, second.String(), "4 finished earlier, 0 to run")
	md, err := os.ReadFile(filepath.Join(dir, "compare-seeds1-1-rft+rft-corpus+bestknown+bestknown-corpus.md"))
	require.NoError(t, err)
	require.True(t, strings.Contains(string(md), "| best known changes (M'₀ + corpus) |"), string(md))
	require.Contains(t, string(md), " -corpus "+corpus)
}
