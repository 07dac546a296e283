package rwm

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/lm2lm/lm2lm/records"
)

// named is one descriptor: its interning key ("d", NUL, name; "" for an
// empty name, which no context knows) and a value.
type named struct {
	key string
	x   float64
}

// effect is what the kernel's features read from a task's descriptors and
// from what a proposal does to them, none of which depends on the
// configuration beyond its Effector: asinh of the descriptors before
// (desc) and, when the Effector built the proposal (built), after the
// change (after), and the changes asinh(after) − asinh(before) that are
// nonzero and finite (delta), a name missing on one side counting 0; each
// sorted by name.
type effect struct {
	desc, after, delta []named
	built              bool
}

// newEffect computes (t, p)'s effect with eff (nil: none, so no after and
// no delta); desc, or an Effector, asks for the descriptors before. Each
// asinh is taken once.
func newEffect(t records.Task, p records.Proposal, eff Effector, desc bool) *effect {
	fx := &effect{}
	if desc || eff != nil {
		fx.desc = asinhNamed(t.Descriptors)
	}
	if eff == nil {
		return fx
	}
	after, err := eff.Effect(t, p)
	if err != nil {
		return fx
	}
	fx.built = true
	fx.after = asinhNamed(after)
	fx.delta = changes(fx.desc, fx.after)
	return fx
}

// asinhNamed returns asinh of d's values sorted by name.
func asinhNamed(d map[string]float64) []named {
	if len(d) == 0 {
		return nil
	}
	out := make([]named, 0, len(d))
	for _, name := range slices.Sorted(maps.Keys(d)) {
		key := ""
		if name != "" {
			key = "d\x00" + name
		}
		out = append(out, named{key: key, x: math.Asinh(d[name])})
	}
	return out
}

// changes returns a − b over the union of the names of two lists sorted
// by name (a name missing on one side counting 0), dropping changes that
// are 0, NaN or infinite.
func changes(before, after []named) []named {
	var out []named
	add := func(key string, d float64) {
		if d == 0 || math.IsNaN(d) || math.IsInf(d, 0) {
			return
		}
		out = append(out, named{key: key, x: d})
	}
	i, j := 0, 0
	for i < len(before) || j < len(after) {
		switch {
		case j == len(after) || (i < len(before) && before[i].key < after[j].key):
			add(before[i].key, 0-before[i].x)
			i++
		case i == len(before) || after[j].key < before[i].key:
			add(after[j].key, after[j].x-0)
			j++
		default:
			add(after[j].key, after[j].x-before[i].x)
			i++
			j++
		}
	}
	return out
}

// effector returns c's Effector when a kernel term reads it, else nil.
func (c EmbeddedConfig) effector() Effector {
	if c.effects() || c.loss() {
		return c.Effects
	}
	return nil
}

// readsDesc reports whether the features hold the task's descriptors
// (for kDesc or the loss term).
func (c EmbeddedConfig) readsDesc() bool { return c.DescriptorWeight > 0 || c.loss() }

// prepared is what factorising a context reads from its records whatever
// the configuration (beyond its Effector): the records in canonical order
// with their keys (sortRecords) and each record's effect, computed once
// per evidence and shared by the records that give the Effector the same
// task and proposal (adjacent in canonical order), so that Tune calls the
// Effector once per distinct (task, proposal), not once per record and
// grid configuration. With share (Tune), it also keeps what TuneGrid's
// hyperparameters do not move for the next configuration: the kernel
// terms (pairTerms) and the records' features, targets and statistics
// (sharedFeats). A prepared is used by one goroutine at a time.
type prepared struct {
	rs    []records.Record
	keys  []string
	fx    []*effect
	eff   Effector
	desc  bool
	share bool
	terms *pairTerms
	feats *sharedFeats
}

// sharedFeats is what buildPrepared derives from the records before the
// Gram matrix: the interned ids, the standardised features, the targets
// and the fitted statistics. They depend on the configuration only through
// featsKey and the priors, which TuneGrid does not vary, so the grid's
// configurations share them (read-only) as they share pairTerms.
type sharedFeats struct {
	key    featsKey
	priors map[string]records.Prior
	intern map[string]int32
	feats  []feat
	y      []float64
	dstat  map[int32][2]float64
	drms   map[int32]float64
}

// featsKey is every configuration field that featuresOf, the targets and
// the statistics read.
type featsKey struct {
	signal, mean, numeric, infeasible, clip float64
	readsDesc, std, loss, effects           bool
	prior                                   *Prior
}

// pairTerms holds, for each pair i ≥ j of a context's records (index
// i(i+1)/2 + j), kDesc (descTerm; nil when DescriptorWeight is 0) and the
// loss term (lossTerm; nil without it): the kernel's costly terms, which
// depend on the records' features only through what key names, and on
// none of the hyperparameters TuneGrid varies.
type pairTerms struct {
	key        termsKey
	desc, loss []float64
}

// termsKey is what pairTerms depend on beyond the prepared records: which
// terms build the features (so the interned ids, and the order of every
// sum over them), the standardisation, and the two lengthscales.
type termsKey struct {
	desc, std, effects, loss bool
	descScale, lossScale     float64
}

// pairTerms returns the pair terms of feats (built by e on p's records),
// computing them unless the last configuration's agree; nil without
// share, or when neither term is on.
func (p *prepared) pairTerms(ctx context.Context, e *Embedded, feats []feat) (*pairTerms, error) {
	c := &e.cfg
	key := termsKey{desc: c.DescriptorWeight > 0, std: c.DescriptorStandardise && c.DescriptorWeight > 0,
		effects: c.effects(), loss: c.loss()}
	if key.desc {
		key.descScale = c.DescriptorLengthscale
	}
	if key.loss {
		key.lossScale = c.LossLengthscale
	}
	if !p.share || (!key.desc && !key.loss) {
		return nil, nil
	}
	if p.terms != nil && p.terms.key == key {
		return p.terms, nil
	}
	n := len(feats)
	t := &pairTerms{key: key}
	if key.desc {
		t.desc = make([]float64, n*(n+1)/2)
	}
	if key.loss {
		t.loss = make([]float64, n*(n+1)/2)
	}
	for i := range n {
		if i%ctxRows == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("rwm: embedded: kernel terms of %d records: %w", n, err)
			}
		}
		for j := 0; j <= i; j++ {
			if t.desc != nil {
				t.desc[i*(i+1)/2+j] = e.descTerm(&feats[i], &feats[j])
			}
			if t.loss != nil {
				t.loss[i*(i+1)/2+j] = e.lossTerm(&feats[i], &feats[j])
			}
		}
	}
	p.terms = t
	return t, nil
}

// kernel is e.kernel of records i ≥ j (a, b) with the pair's terms at
// idx = i(i+1)/2 + j read from t; a nil t computes them.
func (t *pairTerms) kernel(e *Embedded, a, b *feat, idx int) float64 {
	if t == nil {
		return e.kernel(a, b)
	}
	var kd, kl float64
	if t.desc != nil {
		kd = t.desc[idx]
	} else {
		kd = e.descTerm(a, b)
	}
	if t.loss != nil {
		kl = t.loss[idx]
	} else {
		kl = e.lossTerm(a, b)
	}
	return e.kernelWith(a, b, kd, kl)
}

// prepare computes ev's records' effects with eff (nil: none); desc asks
// for the descriptors before even without an Effector. It checks ctx
// every ctxRows records.
func prepare(ctx context.Context, ev records.Evidence, eff Effector, desc bool) (*prepared, error) {
	rs, keys := sortRecords(ev.Records())
	p := &prepared{rs: rs, keys: keys, fx: make([]*effect, len(rs)), eff: eff, desc: desc}
	for i, r := range rs {
		if i%ctxRows == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("rwm: embedded: effects of %d records: %w", len(rs), err)
			}
		}
		if i > 0 && sameInput(rs[i-1], r) {
			p.fx[i] = p.fx[i-1]
			continue
		}
		p.fx[i] = newEffect(r.Task, r.Proposal, eff, desc)
	}
	return p, nil
}

// fits reports whether p's effects are those that c's features read: the
// same Effector (by ID, which names the mapping) or none, and the
// descriptors before when c reads them.
func (p *prepared) fits(c EmbeddedConfig) bool {
	eff := c.effector()
	if (eff == nil) != (p.eff == nil) || (eff != nil && eff.ID() != p.eff.ID()) {
		return false
	}
	return p.desc || !c.readsDesc()
}

// sameInput reports whether a and b give an Effector the same task and
// proposal (so, as Effectors are deterministic, the same effect).
func sameInput(a, b records.Record) bool {
	ta, tb := a.Task, b.Task
	return ta.ID == tb.ID && ta.Family == tb.Family && ta.Split == tb.Split && ta.Metric == tb.Metric &&
		ta.RefLoss == tb.RefLoss && ta.SeedNoise == tb.SeedNoise && ta.Budget == tb.Budget &&
		ta.Description == tb.Description && maps.Equal(ta.Descriptors, tb.Descriptors) &&
		a.Proposal.Mechanism == b.Proposal.Mechanism && a.Proposal.Text == b.Proposal.Text &&
		maps.Equal(a.Proposal.Params, b.Proposal.Params)
}

// interner gives strings int32 ids in a shared table. With add, new
// strings are interned; without, unknown strings get −1 (never equal to a
// record's) and the table is only read, so concurrent queries may share
// it.
type interner struct {
	tab map[string]int32
	add bool
}

// id interns kind NUL s; an empty s is −1.
func (in interner) id(kind, s string) int32 {
	if s == "" {
		return -1
	}
	return in.key(kind + "\x00" + s)
}

// key interns k; an empty k is −1.
func (in interner) key(k string) int32 {
	if k == "" {
		return -1
	}
	if v, ok := in.tab[k]; ok {
		return v
	}
	if !in.add {
		return -1
	}
	v := int32(len(in.tab))
	in.tab[k] = v
	return v
}

// known interns ds's names into dvals sorted by id, dropping the names
// unknown to a read-only table.
func (in interner) known(ds []named) []dval {
	if len(ds) == 0 {
		return nil
	}
	out := make([]dval, 0, len(ds))
	for _, d := range ds {
		if id := in.key(d.key); id != -1 {
			out = append(out, dval{name: id, x: d.x})
		}
	}
	if len(out) == 0 {
		return nil // as without changes: the loss term reads nil as off
	}
	slices.SortFunc(out, func(a, b dval) int { return cmp.Compare(a.name, b.name) })
	return out
}
