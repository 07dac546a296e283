package rwm

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/lm2lm/lm2lm/records"
)

// pinned is the world model Tuned.Pin returns: the embedded model e tuned
// on base, predicting any evidence with e's configuration. An evidence
// that holds base's records and more (base ∪ H: M without a task plus a
// state's history) is factorised from what e derives from base once per
// pin (the records' effects and features, pinBase) and once per value of
// the context's descriptor statistics (the standardised features and the
// kernel's costly pair terms of base's records, pinView): each such
// evidence then costs the kernel's cheap terms over its pairs, the costly
// ones over H's pairs and one factorisation. The result is e's own
// factorisation of that evidence, the same sums in the same order (the
// records in canonical order, the statistics over them), up to the order
// in which new names are interned, so a prediction equals e.Predict's to
// rounding. Which path a query takes depends on its evidence's records
// only, never on what is cached. Every other evidence (base itself, one
// without some of base's records) is e.Predict's.
type pinned struct {
	e    *Embedded
	base records.Evidence

	data    *memo[struct{}, *pinBase]
	views   *memo[string, *pinView] // by statsKey of the context's dstat
	factors *memo[string, *factor]  // by Evidence.Fingerprint; nil: not an extension of base
}

var (
	_ WorldModel = (*pinned)(nil)
	_ Identifier = (*pinned)(nil)
)

// pinBase is what a factorisation reads from base's records whatever the
// records added to them: the records in canonical order with their keys
// and effects (prepared), the interned names and the features before the
// context's statistics, and the targets.
type pinBase struct {
	p      *prepared
	intern map[string]int32
	raw    []feat
	y      []float64
}

// pinView is base's part of a context whose descriptor statistics are
// one dstat: base's features standardised with it (their changes not yet
// scaled by the context's root mean squares) and the kernel's pair terms
// of base's records (index i(i+1)/2 + j, i ≥ j, in canonical order; nil
// when the term is off). Read-only once built.
type pinView struct {
	feats      []feat
	desc, loss []float64
}

func newPinned(e *Embedded, base records.Evidence) *pinned {
	return &pinned{
		e: e, base: base,
		data:    newMemo[struct{}, *pinBase](embeddedPolicy(1)),
		views:   newMemo[string, *pinView](embeddedPolicy(2)),
		factors: newMemo[string, *factor](embeddedPolicy(e.cfg.CacheSize)),
	}
}

// ID names the model and its configuration, as the embedded model's.
func (w *pinned) ID() string { return w.e.ID() }

// Predict returns the embedded model's prediction of q.
func (w *pinned) Predict(ctx context.Context, q Query) (Prediction, error) {
	if p, done, err := w.e.check(ctx, q); done {
		return p, err
	}
	if q.Evidence.Len() <= w.base.Len() {
		return w.e.Predict(ctx, q)
	}
	f, _, err := w.factors.do(ctx, q.Evidence.Fingerprint(), func(ctx context.Context) (*factor, error) {
		return w.extend(ctx, q.Evidence)
	})
	if err != nil {
		return Prediction{}, err
	}
	if f == nil {
		return w.e.Predict(ctx, q)
	}
	return w.e.predictFactor(f, q)
}

// extend factorises ev from base's prepared records, or returns nil when
// ev does not hold every record of base.
func (w *pinned) extend(ctx context.Context, ev records.Evidence) (*factor, error) {
	e := w.e
	pb, _, err := w.data.do(ctx, struct{}{}, w.prepareBase)
	if err != nil {
		return nil, err
	}
	rs, keys := sortRecords(ev.Records())
	src, ok := matchBase(rs, keys, pb.p)
	if !ok {
		return nil, nil
	}
	f, y := e.extendFeatures(pb, rs, keys, src)
	key := e.featsKey()
	if key.std || key.loss {
		f.fitStats() // reads the features before standardisation
	}
	view, _, err := w.views.do(ctx, statsKey(f.dstat), func(ctx context.Context) (*pinView, error) {
		return w.view(ctx, pb, f.dstat)
	})
	if err != nil {
		return nil, err
	}
	for i := range rs {
		if j := src[i]; j >= 0 {
			f.feats[i] = view.feats[j]
			if key.effects {
				f.feats[i].delta = slices.Clone(f.feats[i].delta) // fitEffects scales it
			}
			continue
		}
		f.transform(&f.feats[i], key.std)
	}
	if key.effects {
		f.fitEffects()
	}
	if err := e.factorGram(ctx, f, y, e.pinnedKernel(f, view, src)); err != nil {
		return nil, err
	}
	return f, nil
}

// matchBase matches the records rs (in canonical order, with their keys)
// to base's prepared records p: src[i] is the index in base's canonical
// order of rs[i], or −1 for a record added to base's. Both lists are in
// canonical order, so base's records are matched in one pass. ok is false
// when some record of base is not in rs (or not as it is in base).
func matchBase(rs []records.Record, keys []string, p *prepared) (src []int, ok bool) {
	src = make([]int, len(rs))
	b, nb := 0, len(p.rs)
	for i, r := range rs {
		src[i] = -1
		if b == nb {
			continue
		}
		switch c := compareRecords(keys[i], r, p.keys[b], p.rs[b]); {
		case c == 0 && sameInput(r, p.rs[b]):
			src[i] = b
			b++
		case c >= 0:
			return nil, false // base's record b is not in rs (or not as it is in base)
		}
	}
	return src, b == nb
}

// extendFeatures returns the factorisation of rs (with their keys and
// matchBase's src) before the context's statistics: base's raw features
// and targets where src names one, the features and targets of the added
// records, interned after base's names, beside them. An added record
// shares the effect of the added record before it when they have the
// same input.
func (e *Embedded) extendFeatures(pb *pinBase, rs []records.Record, keys []string, src []int) (*factor, []float64) {
	f := &factor{intern: maps.Clone(pb.intern), keys: keys, feats: make([]feat, len(rs))}
	y := make([]float64, len(rs))
	in := interner{tab: f.intern, add: true}
	var prev int = -1 // the last added record, whose effect the next may share
	var prevFx *effect
	for i, r := range rs {
		if j := src[i]; j >= 0 {
			f.feats[i], y[i] = pb.raw[j], pb.y[j]
			continue
		}
		fx := prevFx
		if prev < 0 || !sameInput(rs[prev], r) {
			fx = newEffect(r.Task, r.Proposal, pb.p.eff, pb.p.desc)
		}
		prev, prevFx = i, fx
		f.feats[i] = e.featuresOf(in, r.Task, r.Proposal, fx)
		y[i] = e.target(r) - f.feats[i].mu
	}
	return f, y
}

// pinnedKernel is the kernel of f's records i ≥ j (matchBase's src), which
// reads the costly pair terms of two of base's records from view where it
// holds them.
func (e *Embedded) pinnedKernel(f *factor, view *pinView, src []int) func(i, j int) float64 {
	return func(i, j int) float64 {
		a, c := &f.feats[i], &f.feats[j]
		bi, bj := src[i], src[j]
		if bi < 0 || bj < 0 {
			return e.kernel(a, c)
		}
		// i ≥ j and canonical order is kept, so bi ≥ bj.
		idx := bi*(bi+1)/2 + bj
		var kd, kl float64
		if view.desc != nil {
			kd = view.desc[idx]
		} else {
			kd = e.descTerm(a, c)
		}
		if view.loss != nil {
			kl = view.loss[idx]
		} else {
			kl = e.lossTerm(a, c)
		}
		return e.kernelWith(a, c, kd, kl)
	}
}

// prepareBase computes base's pinBase.
func (w *pinned) prepareBase(ctx context.Context) (*pinBase, error) {
	e := w.e
	p, err := prepare(ctx, w.base, e.cfg.effector(), e.cfg.readsDesc())
	if err != nil {
		return nil, err
	}
	pb := &pinBase{p: p, intern: map[string]int32{}}
	pb.raw, pb.y = e.rawFeatures(interner{tab: pb.intern, add: true}, p.rs, p.fx)
	return pb, nil
}

// view computes base's pinView for the statistics dstat, checking ctx
// every ctxRows rows of the pair terms.
func (w *pinned) view(ctx context.Context, pb *pinBase, dstat map[int32][2]float64) (*pinView, error) {
	e := w.e
	key := e.featsKey()
	n := len(pb.raw)
	v := &pinView{feats: make([]feat, n)}
	t := &factor{dstat: dstat}
	for i, ft := range pb.raw {
		ft.desc, ft.lb, ft.la = slices.Clone(ft.desc), slices.Clone(ft.lb), slices.Clone(ft.la)
		t.transform(&ft, key.std)
		v.feats[i] = ft
	}
	if e.cfg.DescriptorWeight > 0 {
		v.desc = make([]float64, n*(n+1)/2)
	}
	if e.cfg.loss() {
		v.loss = make([]float64, n*(n+1)/2)
	}
	if v.desc == nil && v.loss == nil {
		return v, nil
	}
	for i := range n {
		if i%ctxRows == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("rwm: embedded: kernel terms of %d records: %w", n, err)
			}
		}
		for j := 0; j <= i; j++ {
			if v.desc != nil {
				v.desc[i*(i+1)/2+j] = e.descTerm(&v.feats[i], &v.feats[j])
			}
			if v.loss != nil {
				v.loss[i*(i+1)/2+j] = e.lossTerm(&v.feats[i], &v.feats[j])
			}
		}
	}
	return v, nil
}

// statsKey names descriptor statistics by their content (ids in order,
// values bit for bit); nil statistics are "".
func statsKey(dstat map[int32][2]float64) string {
	if dstat == nil {
		return ""
	}
	buf := make([]byte, 0, 1+20*len(dstat))
	buf = append(buf, 's')
	for _, id := range slices.Sorted(maps.Keys(dstat)) {
		st := dstat[id]
		buf = binary.LittleEndian.AppendUint32(buf, uint32(id))
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(st[0]))
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(st[1]))
	}
	return string(buf)
}
