package rwm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
)

// referenceFeatures is Embedded.features as it was before the effects were
// computed once per evidence (prepared) and asinh of the task's
// descriptors once per feature: the oracle the shared path must match bit
// for bit.
func referenceFeatures(e *Embedded, tab map[string]int32, add bool, t records.Task, p records.Proposal) feat {
	id := func(kind, s string) int32 {
		if s == "" {
			return -1
		}
		k := kind + "\x00" + s
		if v, ok := tab[k]; ok {
			return v
		}
		if !add {
			return -1
		}
		v := int32(len(tab))
		tab[k] = v
		return v
	}
	mech := records.CanonicalName(p.Mechanism)
	ft := feat{
		task: id("t", t.ID), family: id("f", t.Family), metric: id("m", string(t.Metric)), mech: id("a", mech),
		amp: e.cfg.SignalSigmas, mu: e.cfg.MeanSigmas,
	}
	if pr, ok := e.priors[mech]; ok {
		ft.amp, ft.mu = pr.Std, pr.Mean
	}
	unknown := int32(-2)
	// Names are interned in sorted order, so that a context's ids, and the
	// order of every sum and product over them, do not follow Go's map
	// order: the same records give bit-identical predictions.
	for _, k := range slices.Sorted(maps.Keys(p.Params)) {
		v := p.Params[k]
		name := records.CanonicalName(k)
		nid := id("p", name)
		if nid == -1 {
			// A name no record uses: give it a distinct negative id.
			nid = unknown
			unknown--
		}
		pv := pval{name: nid}
		if x, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			pv.num, pv.x = true, math.Asinh(x/e.cfg.NumericScale)
		} else {
			pv.cat = records.CanonicalValue(v)
		}
		ft.params = append(ft.params, pv)
	}
	slices.SortFunc(ft.params, func(a, b pval) int { return cmp.Compare(a.name, b.name) })
	if e.cfg.DescriptorWeight > 0 || e.cfg.loss() {
		for _, name := range slices.Sorted(maps.Keys(t.Descriptors)) {
			v := t.Descriptors[name]
			did := id("d", name)
			if did == -1 {
				did = unknown
				unknown--
			}
			ft.desc = append(ft.desc, dval{name: did, x: math.Asinh(v)})
		}
		slices.SortFunc(ft.desc, func(a, b dval) int { return cmp.Compare(a.name, b.name) })
	}
	var after map[string]float64
	var effErr error
	if e.cfg.effects() || e.cfg.loss() {
		after, effErr = e.cfg.Effects.Effect(t, p)
	}
	if e.cfg.loss() && effErr == nil {
		ft.lb = slices.Clone(ft.desc)
		for _, name := range slices.Sorted(maps.Keys(after)) {
			v := after[name]
			did := id("d", name)
			if did == -1 {
				continue // no record's task has it: standardised to 0 anyway
			}
			ft.la = append(ft.la, dval{name: did, x: math.Asinh(v)})
		}
		slices.SortFunc(ft.la, func(a, b dval) int { return cmp.Compare(a.name, b.name) })
	}
	if e.cfg.effects() {
		if effErr == nil {
			names := map[string]bool{}
			for n := range after {
				names[n] = true
			}
			for n := range t.Descriptors {
				names[n] = true
			}
			for _, name := range slices.Sorted(maps.Keys(names)) {
				d := math.Asinh(after[name]) - math.Asinh(t.Descriptors[name])
				if d == 0 || math.IsNaN(d) || math.IsInf(d, 0) {
					continue
				}
				did := id("d", name)
				if did == -1 {
					continue // no record changes it: its δ would count 0
				}
				ft.delta = append(ft.delta, dval{name: did, x: d})
			}
			slices.SortFunc(ft.delta, func(a, b dval) int { return cmp.Compare(a.name, b.name) })
		}
	}
	return ft
}

// shift is an Effector for the internal tests, covering what an Effector
// may return: "scale" multiplies "a" by its factor and, with factor 3, adds
// a descriptor "z" no task has; "zero" sets "b" to 0; "keep" changes
// nothing; "drop" removes "c"; "nil" returns no map; anything else cannot
// be built. Calls counts the calls.
type shift struct{ calls *atomic.Int64 }

func (shift) ID() string { return "shift" }

func (s shift) Effect(t records.Task, p records.Proposal) (map[string]float64, error) {
	s.calls.Add(1)
	out := maps.Clone(t.Descriptors)
	if out == nil {
		out = map[string]float64{}
	}
	switch p.Mechanism {
	case "scale":
		f, err := strconv.ParseFloat(p.Params["factor"], 64)
		if err != nil {
			return nil, err
		}
		out["a"] *= f
		if f == 3 {
			out["z"] = 7
		}
	case "zero":
		out["b"] = 0
	case "keep":
	case "drop":
		delete(out, "c")
	case "nil":
		return nil, nil
	default:
		return nil, errors.New("shift: cannot build")
	}
	return out, nil
}

// shiftTask returns a task with a random subset of the descriptors a..f,
// some of them 0.
func shiftTask(rng *rand.Rand, id string) records.Task {
	d := map[string]float64{}
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		switch r := rng.Float64(); {
		case r < 0.2:
		case r < 0.35:
			d[n] = 0
		default:
			d[n] = rng.NormFloat64() * 10
		}
	}
	return records.Task{ID: id, Family: fmt.Sprintf("f%d", rng.IntN(2)), Split: records.Train,
		Metric: records.BitsPerByte, RefLoss: 1.2, SeedNoise: 0.004, Descriptors: d}
}

// shiftProposal returns a random proposal of shift's mechanisms.
func shiftProposal(rng *rand.Rand) records.Proposal {
	mech := []string{"scale", "scale", "zero", "keep", "drop", "nil", "bad"}[rng.IntN(7)]
	return records.Proposal{Mechanism: mech, Params: map[string]string{
		"factor": []string{"0.5", "2", "3"}[rng.IntN(3)], "k": []string{"x", "y"}[rng.IntN(2)]}}
}

// shiftEvidence returns n records over nt random tasks, repeating some
// (task, proposal) pairs.
func shiftEvidence(t *testing.T, rng *rand.Rand, n, nt int) records.Evidence {
	tasks := make([]records.Task, nt)
	for i := range tasks {
		tasks[i] = shiftTask(rng, fmt.Sprintf("t%d", i))
	}
	var rs []records.Record
	for i := range n {
		tk, p := tasks[rng.IntN(nt)], shiftProposal(rng)
		g := rng.NormFloat64() * 0.01
		rs = append(rs, records.Record{Task: tk, Proposal: p, Gain: g, Loss: tk.RefLoss - g, Source: records.Real, Seeds: []uint64{uint64(i)}})
	}
	ev, err := records.NewEvidence(rs...)
	require.NoError(t, err)
	return ev
}

func TestFeaturesMatchReference(t *testing.T) {
	// For every combination of the terms that read descriptors and
	// effects, the features built from the prepared effects (shared by
	// records and configurations) equal the reference's field for field,
	// with the same interning: for a context's records (add) and for
	// queries with names no record has (read-only).
	rng := rand.New(rand.NewPCG(21, 22))
	ev := shiftEvidence(t, rng, 60, 8)
	var calls atomic.Int64
	for _, w := range []float64{0, 0.5} {
		for _, eff := range []Effector{nil, shift{&calls}} {
			for _, es := range []float64{0, 2} {
				for _, ls := range []float64{0, 8} {
					c := DefaultEmbeddedConfig()
					c.DescriptorWeight, c.Effects, c.EffectSigmas, c.LossSigmas, c.LossLengthscale = w, eff, es, ls, 4
					name := fmt.Sprintf("w=%g effector=%v effect=%g loss=%g", w, eff != nil, es, ls)
					e := testEmbedded(t, c)
					p := mustPrepare(t, ev, c.effector(), c.readsDesc())
					got, want := map[string]int32{}, map[string]int32{}
					for i, r := range p.rs {
						require.Equal(t, referenceFeatures(e, want, true, r.Task, r.Proposal),
							e.featuresOf(interner{tab: got, add: true}, r.Task, r.Proposal, p.fx[i]), "%s: record %d", name, i)
					}
					require.Equal(t, want, got, name)
					for i := range 20 {
						q := shiftTask(rng, fmt.Sprintf("q%d", i%3))
						q.Descriptors["new"] = 1.5
						if i%5 == 0 {
							q.Descriptors = map[string]float64{"new": 1.5} // no name the context knows
						}
						pr := shiftProposal(rng)
						pr.Params["other"] = "1"
						require.Equal(t, referenceFeatures(e, want, false, q, pr), e.features(got, false, q, pr), "%s: query %d", name, i)
					}
				}
			}
		}
	}
}

// distinctPairs counts the distinct (task, proposal) pairs of ev's
// records: how often an Effector called once per pair runs.
func distinctPairs(ev records.Evidence) int {
	seen := map[string]bool{}
	for _, r := range ev.Records() {
		seen[r.Task.ID+"\x00"+r.Proposal.Key()] = true
	}
	return len(seen)
}

func TestPrepareOneEffectPerTaskAndProposal(t *testing.T) {
	// The Effector runs once per distinct (task, proposal) of the records,
	// and records of one task and proposal share its effect.
	rng := rand.New(rand.NewPCG(23, 24))
	ev := shiftEvidence(t, rng, 80, 4)
	distinct := distinctPairs(ev)
	require.Less(t, distinct, ev.Len(), "some pairs repeat")
	var calls atomic.Int64
	p := mustPrepare(t, ev, shift{&calls}, false)
	require.Equal(t, int64(distinct), calls.Load())
	for i := 1; i < len(p.rs); i++ {
		require.Equal(t, p.keys[i] == p.keys[i-1], p.fx[i] == p.fx[i-1], "record %d", i)
	}
	// Without an Effector nothing is called, and descriptors are read
	// only when asked for.
	calls.Store(0)
	require.Nil(t, mustPrepare(t, ev, nil, false).fx[0].desc)
	require.NotNil(t, mustPrepare(t, ev, nil, true).fx[0].desc)
	require.Zero(t, calls.Load())
}

func TestSameInputReadsEveryField(t *testing.T) {
	// sameInput compares every field of a task and a proposal: a record
	// that differs from another in any one of them gets its own effect.
	require.Equal(t, 9, reflect.TypeOf(records.Task{}).NumField(), "update sameInput for the new field")
	require.Equal(t, 3, reflect.TypeOf(records.Proposal{}).NumField(), "update sameInput for the new field")
	base := records.Record{
		Task: records.Task{ID: "t", Family: "f", Split: records.Train, Metric: records.BitsPerByte, RefLoss: 1, SeedNoise: 0.1,
			Budget: 3, Description: "d", Descriptors: map[string]float64{"a": 1}},
		Proposal: records.Proposal{Mechanism: "m", Params: map[string]string{"x": "1"}, Text: "p"},
	}
	require.True(t, sameInput(base, base))
	for i, f := range []func(*records.Record){
		func(r *records.Record) { r.Task.ID = "u" },
		func(r *records.Record) { r.Task.Family = "g" },
		func(r *records.Record) { r.Task.Split = records.HeldOut },
		func(r *records.Record) { r.Task.Metric = records.NatsPerToken },
		func(r *records.Record) { r.Task.RefLoss = 2 },
		func(r *records.Record) { r.Task.SeedNoise = 0.2 },
		func(r *records.Record) { r.Task.Budget = 4 },
		func(r *records.Record) { r.Task.Description = "e" },
		func(r *records.Record) { r.Task.Descriptors = map[string]float64{"a": 2} },
		func(r *records.Record) { r.Proposal.Mechanism = "M" },
		func(r *records.Record) { r.Proposal.Params = map[string]string{"x": "1.0"} },
		func(r *records.Record) { r.Proposal.Text = "q" },
	} {
		b := base
		f(&b)
		require.False(t, sameInput(base, b), "change %d", i)
	}
}

func TestTuneSharesEffectsAcrossConfigurations(t *testing.T) {
	// Tune prepares the records' effects once for the grid: the Effector
	// runs once per distinct (task, proposal), not once per record and
	// configuration (81 × 40 before), and the log marginal it picks equals,
	// bit for bit, LogMarginal of that configuration prepared on its own.
	rng := rand.New(rand.NewPCG(25, 26))
	ev := shiftEvidence(t, rng, 40, 5)
	distinct := distinctPairs(ev)
	var calls atomic.Int64
	c := DefaultEmbeddedConfig()
	c.DescriptorWeight = 1
	c = WithEffects(c, shift{&calls})
	best, lm, err := Tune(context.Background(), c, ev, nil)
	require.NoError(t, err)
	require.Equal(t, int64(distinct), calls.Load())
	alone, err := LogMarginal(context.Background(), best, ev)
	require.NoError(t, err)
	require.Equal(t, alone, lm)
	// A grid whose configurations read different effects prepares again
	// for each change: nil Effector, then shift, then a shift without the
	// loss and effect terms (which calls nothing).
	calls.Store(0)
	off := c
	off.EffectSigmas, off.LossSigmas = 0, 0
	_, _, err = Tune(context.Background(), c, ev, []EmbeddedConfig{DefaultEmbeddedConfig(), c, c, off})
	require.NoError(t, err)
	require.Equal(t, int64(distinct), calls.Load())
}

// shareCase is one configuration run in turn on a shared prepared context
// and whether it reuses the kernel terms and the record features that the
// configuration before it kept.
type shareCase struct {
	name         string
	cfg          EmbeddedConfig
	terms, feats bool
}

func TestTuneSharesKernelTermsAndRecordFeatures(t *testing.T) {
	// Configurations run in turn on one prepared context (as Tune runs
	// its grid) reuse the kernel's descriptor and loss terms while they
	// agree on them, and the records' interned features, targets and
	// statistics while they agree on what those read (TuneGrid's
	// configurations do: they vary noise, correlations and lengthscales
	// only); a lengthscale, the standardisation, a term, a field the
	// features read or the priors make them be rebuilt. Each log marginal
	// equals, bit for bit, LogMarginal of its configuration alone; without
	// share nothing is kept.
	ev := shiftEvidence(t, rand.New(rand.NewPCG(27, 28)), 40, 5)
	var calls atomic.Int64
	c := DefaultEmbeddedConfig()
	c.DescriptorWeight = 1
	c = WithEffects(c, shift{&calls})
	v := func(f func(*EmbeddedConfig)) EmbeddedConfig {
		w := c
		f(&w)
		return w
	}
	grid := TuneGrid(c)
	p := mustPrepare(t, ev, shift{&calls}, true)
	p.share = true
	for _, tc := range []shareCase{
		{"grid 0", grid[0], false, false},
		{"grid 1", grid[1], true, true},
		{"grid 40", grid[40], true, true},
		{"grid 80", grid[80], true, true},
		{"descriptor lengthscale", v(func(v *EmbeddedConfig) { v.DescriptorLengthscale = 2 }), false, true},
		{"loss lengthscale", v(func(v *EmbeddedConfig) { v.LossLengthscale = 1 }), false, true},
		{"unstandardised", v(func(v *EmbeddedConfig) { v.DescriptorStandardise = false }), false, false},
		{"no effect term", v(func(v *EmbeddedConfig) { v.EffectSigmas = 0 }), false, false},
		{"no descriptor kernel", v(func(v *EmbeddedConfig) { v.DescriptorWeight = 0 }), false, false},
		{"no loss term", v(func(v *EmbeddedConfig) { v.LossSigmas = 0 }), false, false},
		{"base", c, false, false},
		{"signal", v(func(v *EmbeddedConfig) { v.SignalSigmas = 3 }), true, false},
		{"mean", v(func(v *EmbeddedConfig) { v.MeanSigmas = -0.5 }), true, false},
		{"numeric scale", v(func(v *EmbeddedConfig) { v.NumericScale = 1e-3 }), true, false},
		{"infeasible", v(func(v *EmbeddedConfig) { v.InfeasibleSigmas = -4 }), true, false},
		{"priors", v(func(v *EmbeddedConfig) { v.Priors = map[string]records.Prior{"m1": {Mean: 1, Std: 2}} }), true, false},
		{"base", c, true, false},
		{"base again, another lengthscale", v(func(v *EmbeddedConfig) { v.Lengthscale = 1 }), true, true},
	} {
		require.True(t, p.fits(tc.cfg), tc.name)
		terms, feats := p.terms, p.feats
		got, err := logMarginal(context.Background(), tc.cfg, p)
		require.NoError(t, err)
		require.NotNil(t, p.terms, tc.name)
		require.NotNil(t, p.feats, tc.name)
		require.Equal(t, tc.terms, p.terms == terms, "%s: kernel terms", tc.name)
		require.Equal(t, tc.feats, p.feats == feats, "%s: record features", tc.name)
		want, err := LogMarginal(context.Background(), tc.cfg, ev)
		require.NoError(t, err)
		require.Equal(t, want, got, tc.name)
	}
	alone := mustPrepare(t, ev, shift{&calls}, true)
	_, err := logMarginal(context.Background(), c, alone)
	require.NoError(t, err)
	require.Nil(t, alone.terms)
	require.Nil(t, alone.feats)
}
