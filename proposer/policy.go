package proposer

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode"

	"github.com/lm2lm/lm2lm/records"
)

// Policy is the embedded trainable proposer: a log-linear (softmax) policy
// over a mechanism catalogue (DESIGN.md, Embedded defaults). A proposal is
// a short token sequence: first the card, then one choice for each of the
// card's parameters in catalogue order. Token i is drawn from
//
//	π(k | s, tokens[:i]) = softmax_k(z / T),  z_k = b_k + Σ_f W[f, k] · x_f(s, tokens[:i])
//
// with one weight matrix W and bias b per decision ("head"): one head for
// the card and one per (card, parameter), so every parameter token is
// conditioned on its card exactly. With PolicyConfig.Hidden = H > 0 every
// head's logits also gain V_head · h, where h = tanh(U · x_state + c) is
// one hidden layer of H units over the state features, shared by all heads
// (a residual addition to the log-linear policy). The binary features x are:
//
//   - state: the task family (hashed one-hot, PolicyConfig.FamilyBuckets),
//     the metric (bits per byte, nats per token, other), the budget (log₂
//     bucket, 0 = unknown), the history length (0..records.MaxHistory), for
//     each card of the catalogue whether the history holds it with a
//     positive gain, a non-positive gain or an infeasible run, and the same
//     three indicators for the most recent history record alone, and the
//     hashed words of the task's description (PolicyConfig.DescriptionBuckets),
//     and its binned numeric descriptors (PolicyConfig.DescriptorBuckets)
//     (METHOD.md §1 Vocabulary: research state s = (e, h));
//   - previous tokens: for a parameter token, the choices already made for
//     the card's earlier parameters.
//
// Per-token log-probs, their analytic gradients, Adam, DAPO updates
// (Update) and supervised updates (Supervise) are implemented on this
// structure; Marshal/Unmarshal (MarshalBinary, UnmarshalBinary) carry the
// weights, the Adam state, the config and the catalogue.
//
// A Policy is made by NewPolicy or by UnmarshalBinary on a zero Policy;
// other methods of a zero Policy fail with ErrNotInitialised. It is safe
// for concurrent use: Propose, Score and CardProbs share a
// read lock; Update, Supervise, SetTemperature and UnmarshalBinary take the
// write lock and so wait for, and exclude, everything else.
type Policy struct {
	mu    sync.RWMutex
	cfg   PolicyConfig
	cat   []records.Card
	lay   layout
	theta []float64 // parameters, laid out by lay
	adamM []float64 // Adam first moments
	adamV []float64 // Adam second moments
	step  int       // Adam steps taken
}

var (
	_ Trainable  = (*Policy)(nil)
	_ Scorer     = (*Policy)(nil)
	_ Supervisor = (*Policy)(nil)
)

// Outcome classes of a history record, for the history features.
const (
	outPositive = iota // gain > 0
	outNonPositive
	outInfeasible
	numOutcomes
)

// Buckets of the budget feature: 0 = unknown, 1 + ⌊log₂ budget⌋ capped.
const budgetBuckets = 17

// Metric features: bits per byte, nats per token, anything else.
const metricFeatures = 3

// head is one softmax decision. Its weights are feature-major: W[f, k] is
// theta[off + f*nOut + k]; the bias b_k is theta[off + dIn*nOut + k]. With
// a hidden layer of H units, its output weights are V[k, i] =
// theta[v + k*H + i].
type head struct {
	off, dIn, nOut int
	v              int
}

type paramLayout struct {
	name    string // as in the catalogue
	canon   string // canonical name
	choices []string
	canonCh []string // canonical choice values
	head    int      // index into layout.heads
	prevOff int      // offset of this parameter's one-hot block among the previous-choice features
}

type cardLayout struct {
	mechanism string // as in the catalogue ("none" for the no-change token)
	canon     string
	params    []paramLayout
}

// layout maps the catalogue to heads and feature indices.
type layout struct {
	cards     []cardLayout // catalogue order; the no-change card last when enabled
	byName    map[string]int
	heads     []head // heads[0] is the card head
	nParams   int    // len(theta)
	dState    int    // number of state features
	famOff    int
	metricOff int
	budgetOff int
	histLen   int
	histSet   int // offset of the (slot, outcome) indicators over the whole history
	histLast  int // offset of the (slot, outcome) indicators of the last record
	descOff   int // offset of the hashed description words
	descN     int // number of description buckets (0 = none)
	dscOff    int // offset of the hashed descriptor bins
	dscN      int // number of descriptor buckets (0 = none)
	nSlots    int // catalogue cards + no-change + unknown
	hidden    int // hidden units H (0 = none)
	uOff      int // U[f, i] = theta[uOff + f*H + i], f < dState; len(theta) when H = 0
	cOff      int // c_i = theta[cOff + i]
}

// hiddenInitStd is σ, the standard deviation of the initial hidden weights
// U ~ N(0, σ²). Library choice: a state with n active features starts
// with pre-activations of standard deviation σ·√n, and σ = 0.1 keeps them
// in tanh's range (below 1) for the lab's states, which have tens of
// features.
const hiddenInitStd = 0.1

// NewPolicy returns the policy for catalogue under cfg. With cfg.InitStd = 0
// all weights start at zero (the uniform policy) and rng may be nil;
// otherwise rng draws the initial weights of the log-linear heads, so
// equal seeds give equal policies. With cfg.Hidden > 0, rng must not be
// nil: after those draws it draws the hidden weights U ~ N(0, σ²) (σ =
// 0.1, hiddenInitStd), while the hidden biases c and the
// output weights V start at zero, so the hidden layer adds nothing to the
// initial logits (with InitStd = 0 the initial policy is still exactly
// uniform). The catalogue is copied; it must be non-empty, with distinct,
// non-empty mechanisms other than records.NoChange, distinct non-empty
// parameter names within a card and at least one distinct choice per
// parameter.
func NewPolicy(catalogue []records.Card, cfg PolicyConfig, rng *rand.Rand) (*Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lay, err := newLayout(catalogue, cfg)
	if err != nil {
		return nil, err
	}
	p := &Policy{
		cfg:   cfg,
		cat:   cloneCatalogue(catalogue),
		lay:   lay,
		theta: make([]float64, lay.nParams),
		adamM: make([]float64, lay.nParams),
		adamV: make([]float64, lay.nParams),
	}
	if cfg.InitStd > 0 {
		if rng == nil {
			return nil, fmt.Errorf("%w: InitStd = %g needs an rng", ErrConfig, cfg.InitStd)
		}
		for i := range p.theta[:lay.uOff] {
			p.theta[i] = cfg.InitStd * rng.NormFloat64()
		}
	}
	if cfg.Hidden > 0 {
		if rng == nil {
			return nil, fmt.Errorf("%w: Hidden = %d needs an rng", ErrConfig, cfg.Hidden)
		}
		for i := lay.uOff; i < lay.cOff; i++ {
			p.theta[i] = hiddenInitStd * rng.NormFloat64()
		}
	}
	return p, nil
}

// newLayout checks catalogue (as NewPolicy documents) and lays out the
// policy's cards, state features and parameters under cfg.
func newLayout(catalogue []records.Card, cfg PolicyConfig) (layout, error) {
	if len(catalogue) == 0 {
		return layout{}, fmt.Errorf("%w: empty", ErrCatalogue)
	}
	lay := layout{byName: make(map[string]int, len(catalogue)+1)}
	for i, c := range catalogue {
		cl := cardLayout{mechanism: c.Mechanism, canon: records.CanonicalName(c.Mechanism)}
		switch {
		case cl.canon == "":
			return layout{}, fmt.Errorf("%w: card %d has an empty mechanism", ErrCatalogue, i)
		case cl.canon == records.NoChange:
			return layout{}, fmt.Errorf("%w: card %d is the no-change mechanism %q (use PolicyConfig.NoChange)", ErrCatalogue, i, c.Mechanism)
		}
		if j, dup := lay.byName[cl.canon]; dup {
			return layout{}, fmt.Errorf("%w: cards %d and %d share mechanism %q", ErrCatalogue, j, i, cl.canon)
		}
		var err error
		if cl.params, err = paramLayouts(c); err != nil {
			return layout{}, err
		}
		lay.byName[cl.canon] = i
		lay.cards = append(lay.cards, cl)
	}
	if cfg.NoChange {
		lay.byName[records.NoChange] = len(lay.cards)
		lay.cards = append(lay.cards, cardLayout{mechanism: records.NoChange, canon: records.NoChange})
	}
	lay.placeFeatures(len(catalogue), cfg)
	lay.placeParams(cfg.Hidden)
	return lay, nil
}

// paramLayouts checks the parameters of card c (distinct, non-empty
// names, each with at least one choice and no empty or repeated one) and
// returns their layouts, before the heads are placed.
func paramLayouts(c records.Card) ([]paramLayout, error) {
	var params []paramLayout
	seen := map[string]bool{}
	for j, ps := range c.Params {
		pl := paramLayout{name: ps.Name, canon: records.CanonicalName(ps.Name), choices: append([]string(nil), ps.Choices...)}
		if pl.canon == "" {
			return nil, fmt.Errorf("%w: card %s parameter %d has an empty name", ErrCatalogue, c.Mechanism, j)
		}
		if seen[pl.canon] {
			return nil, fmt.Errorf("%w: card %s repeats parameter %q", ErrCatalogue, c.Mechanism, pl.canon)
		}
		seen[pl.canon] = true
		if len(ps.Choices) == 0 {
			return nil, fmt.Errorf("%w: card %s parameter %s has no choices", ErrCatalogue, c.Mechanism, ps.Name)
		}
		chSeen := map[string]bool{}
		for _, ch := range ps.Choices {
			cv := records.CanonicalValue(ch)
			if cv == "" {
				return nil, fmt.Errorf("%w: card %s parameter %s has an empty choice", ErrCatalogue, c.Mechanism, ps.Name)
			}
			if chSeen[cv] {
				return nil, fmt.Errorf("%w: card %s parameter %s repeats choice %q", ErrCatalogue, c.Mechanism, ps.Name, ch)
			}
			chSeen[cv] = true
			pl.canonCh = append(pl.canonCh, cv)
		}
		params = append(params, pl)
	}
	return params, nil
}

// placeFeatures sets the offsets of the state features' blocks for a
// catalogue of k cards, and their number dState.
func (lay *layout) placeFeatures(k int, cfg PolicyConfig) {
	lay.nSlots = k + 2
	off := 0
	lay.famOff, off = off, off+cfg.FamilyBuckets
	lay.metricOff, off = off, off+metricFeatures
	lay.budgetOff, off = off, off+budgetBuckets
	lay.histLen, off = off, off+records.MaxHistory+1
	lay.histSet, off = off, off+lay.nSlots*numOutcomes
	lay.histLast, off = off, off+lay.nSlots*numOutcomes
	lay.descOff, lay.descN, off = off, cfg.DescriptionBuckets, off+cfg.DescriptionBuckets
	lay.dscOff, lay.dscN, off = off, cfg.DescriptorBuckets, off+cfg.DescriptorBuckets
	lay.dState = off
}

// placeParams places the parameters in theta: the heads (the card head,
// then one per (card, parameter), each reading the state and the one-hot
// choices of its card's earlier parameters), then, with hidden units, U, c
// and each head's V after every head, so that without them the layout is
// the log-linear one.
func (lay *layout) placeParams(hidden int) {
	n := 0
	add := func(dIn, nOut int) int {
		lay.heads = append(lay.heads, head{off: n, dIn: dIn, nOut: nOut})
		n += (dIn + 1) * nOut
		return len(lay.heads) - 1
	}
	add(lay.dState, len(lay.cards))
	for ci := range lay.cards {
		prev := 0
		for pi := range lay.cards[ci].params {
			pl := &lay.cards[ci].params[pi]
			pl.prevOff = prev
			pl.head = add(lay.dState+prev, len(pl.choices))
			prev += len(pl.choices)
		}
	}
	lay.hidden, lay.uOff = hidden, n
	if hidden > 0 {
		n += lay.dState * hidden
		lay.cOff = n
		n += hidden
		for i := range lay.heads {
			lay.heads[i].v = n
			n += lay.heads[i].nOut * hidden
		}
	} else {
		lay.cOff = n
	}
	lay.nParams = n
}

// stateFeatures returns the active (value 1) state feature indices of s,
// distinct and in increasing order within each block.
func (l *layout) stateFeatures(s records.State, buckets int) []int {
	f := make([]int, 0, 8+2*len(s.History))
	h := fnv.New64a()
	h.Write([]byte(records.CanonicalName(s.Task.Family)))
	f = append(f, l.famOff+int(h.Sum64()%uint64(buckets)))
	switch s.Task.Metric {
	case records.BitsPerByte:
		f = append(f, l.metricOff)
	case records.NatsPerToken:
		f = append(f, l.metricOff+1)
	default:
		f = append(f, l.metricOff+2)
	}
	f = append(f, l.budgetOff+budgetBucket(s.Task.Budget))
	hl := min(len(s.History), records.MaxHistory)
	f = append(f, l.histLen+hl)
	hist := s.History
	if len(hist) > records.MaxHistory {
		hist = hist[len(hist)-records.MaxHistory:]
	}
	start := len(f)
	for _, r := range hist {
		idx := l.histSet + l.slot(r.Proposal)*numOutcomes + outcome(r)
		dup := false
		for _, g := range f[start:] {
			if g == idx {
				dup = true
				break
			}
		}
		if !dup {
			f = append(f, idx)
		}
	}
	if len(hist) > 0 {
		r := hist[len(hist)-1]
		f = append(f, l.histLast+l.slot(r.Proposal)*numOutcomes+outcome(r))
	}
	f = append(f, l.descriptionFeatures(s.Task.Description)...)
	return append(f, l.descriptorFeatures(s.Task.Descriptors)...)
}

// descriptorFeatures returns the distinct hashed (name, bin) indices of a
// task's descriptors in increasing order (PolicyConfig.DescriptorBuckets).
func (l *layout) descriptorFeatures(d map[string]float64) []int {
	if l.dscN == 0 || len(d) == 0 {
		return nil
	}
	out := make([]int, 0, len(d))
	var buf [8]byte
	for name, v := range d {
		h := fnv.New64a()
		h.Write([]byte(name))
		h.Write([]byte{0})
		binary.LittleEndian.PutUint64(buf[:], uint64(descriptorBin(v)))
		h.Write(buf[:])
		out = append(out, l.dscOff+int(h.Sum64()%uint64(l.dscN)))
	}
	sort.Ints(out)
	return slices.Compact(out)
}

// descriptorBin is the quarter-octave bin ⌊4·sign(v)·log₂(1 + |v|)⌋ of a
// descriptor value (PolicyConfig.DescriptorBuckets).
func descriptorBin(v float64) int64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return math.MinInt64
	}
	b := 4 * math.Log2(1+math.Abs(v))
	if v < 0 {
		b = -b
	}
	return int64(math.Floor(b))
}

// descriptionFeatures returns the distinct hashed-word indices of a task
// description in increasing order. A word is a maximal run of letters,
// digits and the characters . - + (so "8e-3" and "0.008" stay whole), with
// trailing dots removed and letters lower-cased.
func (l *layout) descriptionFeatures(desc string) []int {
	if l.descN == 0 || desc == "" {
		return nil
	}
	words := strings.FieldsFunc(strings.ToLower(desc), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '.' && r != '-' && r != '+'
	})
	seen := make(map[int]bool, len(words))
	var out []int
	for _, w := range words {
		w = strings.TrimRight(w, ".")
		if w == "" {
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(w))
		i := l.descOff + int(h.Sum64()%uint64(l.descN))
		if !seen[i] {
			seen[i] = true
			out = append(out, i)
		}
	}
	sort.Ints(out)
	return out
}

// slot is the history slot of a proposal's mechanism: its card index, then
// the no-change slot, then the slot shared by unknown mechanisms.
func (l *layout) slot(p records.Proposal) int {
	c := records.CanonicalName(p.Mechanism)
	if c == records.NoChange {
		return l.nSlots - 2
	}
	if i, ok := l.byName[c]; ok && i < l.nSlots-2 {
		return i
	}
	return l.nSlots - 1
}

func outcome(r records.Record) int {
	switch {
	case r.Infeasible != "":
		return outInfeasible
	case r.Gain > 0:
		return outPositive
	default:
		return outNonPositive
	}
}

func budgetBucket(b int) int {
	if b <= 0 {
		return 0
	}
	return 1 + min(bits.Len(uint(b))-1, budgetBuckets-2)
}

// tokenFeatures returns the features of decision t of a sequence whose card
// is card and whose earlier choices are toks[1:t]: the state features plus,
// for a parameter token, the previous-choice indicators.
func (l *layout) tokenFeatures(dst, state []int, card int, toks []int, t int) (head, []int) {
	dst = append(dst[:0], state...)
	if t == 0 {
		return l.heads[0], dst
	}
	ps := l.cards[card].params
	for i := 0; i < t-1; i++ {
		dst = append(dst, l.dState+ps[i].prevOff+toks[i+1])
	}
	return l.heads[ps[t-1].head], dst
}

// hiddenAct returns the hidden activations h = tanh(U · x_state + c) of
// the active state features, or nil without a hidden layer.
func (p *Policy) hiddenAct(state []int) []float64 {
	nh := p.lay.hidden
	if nh == 0 {
		return nil
	}
	a := append([]float64(nil), p.theta[p.lay.cOff:p.lay.cOff+nh]...)
	for _, f := range state {
		row := p.theta[p.lay.uOff+f*nh : p.lay.uOff+(f+1)*nh]
		for i, u := range row {
			a[i] += u
		}
	}
	for i := range a {
		a[i] = math.Tanh(a[i])
	}
	return a
}

// logits writes z_k / T for head h, active features x and hidden
// activations hid (nil without a hidden layer) into out.
func (p *Policy) logits(out []float64, h head, x []int, hid []float64, temp float64) []float64 {
	out = out[:0]
	bias := p.theta[h.off+h.dIn*h.nOut : h.off+(h.dIn+1)*h.nOut]
	out = append(out, bias...)
	for _, f := range x {
		row := p.theta[h.off+f*h.nOut : h.off+(f+1)*h.nOut]
		for k, w := range row {
			out[k] += w
		}
	}
	if nh := len(hid); nh > 0 {
		for k := range out {
			var s float64
			for i, w := range p.theta[h.v+k*nh : h.v+(k+1)*nh] {
				s += w * hid[i]
			}
			out[k] += s
		}
	}
	for k := range out {
		out[k] /= temp
	}
	return out
}

// logSoftmax turns z into log-probabilities in place and returns them.
func logSoftmax(z []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range z {
		m = max(m, v)
	}
	var s float64
	for _, v := range z {
		s += math.Exp(v - m)
	}
	lse := m + math.Log(s)
	for k := range z {
		z[k] -= lse
	}
	return z
}

func entropy(logp []float64) float64 {
	var h float64
	for _, lp := range logp {
		if lp > math.Inf(-1) {
			h -= math.Exp(lp) * lp
		}
	}
	return h
}

// draw samples an index from log-probabilities with one uniform variate.
func draw(logp []float64, rng *rand.Rand) int {
	u := rng.Float64()
	var c float64
	for k, lp := range logp {
		c += math.Exp(lp)
		if u < c {
			return k
		}
	}
	// Rounding left u above the total: take the last token with mass.
	for k := len(logp) - 1; k > 0; k-- {
		if logp[k] > math.Inf(-1) {
			return k
		}
	}
	return 0
}

// checkRequest reports, for operation op, a cancelled ctx, n < 0 or an
// invalid state: what Propose and Top refuse before reading the policy.
func checkRequest(ctx context.Context, op string, s records.State, n int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("proposer: %s: %w", op, err)
	}
	if n < 0 {
		return fmt.Errorf("proposer: %s: n = %d < 0", op, n)
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("proposer: %s: %w", op, err)
	}
	return nil
}

// Propose samples n proposals for s at the policy's temperature. Every
// sample carries its tokens (the card's mechanism, then "name=choice" per
// parameter), their log-probs and the temperature. It fails for an invalid
// state or n < 0 and returns a wrapped ctx.Err() on cancellation.
func (p *Policy) Propose(ctx context.Context, s records.State, n int, rng *rand.Rand) ([]Sample, error) {
	if err := checkRequest(ctx, "propose", s, n); err != nil {
		return nil, err
	}
	if n == 0 {
		return []Sample{}, nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if err := p.ready(); err != nil {
		return nil, fmt.Errorf("proposer: propose: %w", err)
	}
	temp := p.cfg.Temperature
	state := p.lay.stateFeatures(s, p.cfg.FamilyBuckets)
	hid := p.hiddenAct(state)
	cardLogp := logSoftmax(p.logits(nil, p.lay.heads[0], state, hid, temp))
	var buf []float64
	var x []int
	out := make([]Sample, n)
	for i := range out {
		if i%256 == 255 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("proposer: propose: %w", err)
			}
		}
		c := draw(cardLogp, rng)
		cl := &p.lay.cards[c]
		toks := make([]int, 1+len(cl.params))
		toks[0] = c
		lp := make([]float64, 1+len(cl.params))
		lp[0] = cardLogp[c]
		for t := 1; t < len(toks); t++ {
			var h head
			h, x = p.lay.tokenFeatures(x, state, c, toks, t)
			buf = logSoftmax(p.logits(buf, h, x, hid, temp))
			k := draw(buf, rng)
			toks[t] = k
			lp[t] = buf[k]
		}
		pr, strs := p.lay.decode(toks)
		out[i] = Sample{Proposal: pr, Tokens: strs, LogProbs: lp, Temperature: temp}
	}
	return out, nil
}

// encode maps a sample to token indices: the card, then each parameter's
// choice. The proposal decides; the sample's Tokens, when present, must be
// the ones the policy would emit for it.
func (l *layout) encode(smp Sample) ([]int, error) {
	if smp.Invalid {
		return nil, fmt.Errorf("%w: sample marked invalid (%s)", ErrBadItem, smp.Reason)
	}
	pr := smp.Proposal
	c, ok := l.byName[records.CanonicalName(pr.Mechanism)]
	if !ok {
		return nil, fmt.Errorf("%w: mechanism %q", ErrNotInCatalogue, pr.Mechanism)
	}
	cl := &l.cards[c]
	if len(pr.Params) != len(cl.params) {
		return nil, fmt.Errorf("%w: %s has %d parameters, card %s has %d", ErrNotInCatalogue, pr.Key(), len(pr.Params), cl.mechanism, len(cl.params))
	}
	vals := make(map[string]string, len(pr.Params))
	for k, v := range pr.Params {
		vals[records.CanonicalName(k)] = records.CanonicalValue(v)
	}
	toks := make([]int, 1+len(cl.params))
	toks[0] = c
	for i, pl := range cl.params {
		v, ok := vals[pl.canon]
		if !ok {
			return nil, fmt.Errorf("%w: %s lacks parameter %s", ErrNotInCatalogue, pr.Key(), pl.name)
		}
		k := -1
		for j, ch := range pl.canonCh {
			if ch == v {
				k = j
				break
			}
		}
		if k < 0 {
			return nil, fmt.Errorf("%w: %s: %s = %q is not one of %q", ErrNotInCatalogue, pr.Key(), pl.name, pr.Params[pl.name], pl.choices)
		}
		toks[i+1] = k
	}
	if len(smp.Tokens) > 0 {
		if len(smp.Tokens) != len(toks) {
			return nil, fmt.Errorf("%w: %d tokens for proposal %s, want %d", ErrBadItem, len(smp.Tokens), pr.Key(), len(toks))
		}
		if records.CanonicalName(smp.Tokens[0]) != cl.canon {
			return nil, fmt.Errorf("%w: token 0 %q does not match mechanism %q", ErrBadItem, smp.Tokens[0], pr.Mechanism)
		}
		for i, pl := range cl.params {
			if smp.Tokens[i+1] == pl.name+"="+pl.choices[toks[i+1]] {
				continue
			}
			name, val, ok := strings.Cut(smp.Tokens[i+1], "=")
			if !ok || records.CanonicalName(name) != pl.canon || records.CanonicalValue(val) != pl.canonCh[toks[i+1]] {
				return nil, fmt.Errorf("%w: token %d %q does not match %s = %q", ErrBadItem, i+1, smp.Tokens[i+1], pl.name, pl.choices[toks[i+1]])
			}
		}
	}
	return toks, nil
}

// sampleTemp is the temperature to score smp at: its own, or the policy's
// when the sample does not say (Temperature ≤ 0 or not finite).
func (p *Policy) sampleTemp(smp Sample) float64 {
	if smp.Temperature > 0 && !math.IsInf(smp.Temperature, 0) {
		return smp.Temperature
	}
	return p.cfg.Temperature
}

// Score returns the current per-token log-probs of smp's tokens for state
// s at smp's temperature (the policy's when smp.Temperature ≤ 0). The
// proposal must be in the catalogue (ErrNotInCatalogue otherwise).
func (p *Policy) Score(ctx context.Context, s records.State, smp Sample) ([]float64, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("proposer: score: %w", err)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if err := p.ready(); err != nil {
		return nil, fmt.Errorf("proposer: score: %w", err)
	}
	toks, err := p.lay.encode(smp)
	if err != nil {
		return nil, fmt.Errorf("proposer: score: %w", err)
	}
	state := p.lay.stateFeatures(s, p.cfg.FamilyBuckets)
	hid := p.hiddenAct(state)
	lp := make([]float64, len(toks))
	var buf []float64
	var x []int
	for t := range toks {
		var h head
		h, x = p.lay.tokenFeatures(x, state, toks[0], toks, t)
		buf = logSoftmax(p.logits(buf, h, x, hid, p.sampleTemp(smp)))
		lp[t] = buf[toks[t]]
	}
	return lp, nil
}

// CardProbs returns the current probability of each card token for s at
// the policy's temperature, in catalogue order, followed by the no-change
// token when PolicyConfig.NoChange is set (nil for a zero Policy). The
// mechanism share of a policy's proposals (METHOD.md §1 Headline results,
// the case study) can be read from it directly.
func (p *Policy) CardProbs(s records.State) []float64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.ready() != nil {
		return nil
	}
	state := p.lay.stateFeatures(s, p.cfg.FamilyBuckets)
	lp := logSoftmax(p.logits(nil, p.lay.heads[0], state, p.hiddenAct(state), p.cfg.Temperature))
	for k := range lp {
		lp[k] = math.Exp(lp[k])
	}
	return lp
}

// Mechanisms returns the mechanisms of the card tokens in the order of
// CardProbs.
func (p *Policy) Mechanisms() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]string, len(p.lay.cards))
	for i, c := range p.lay.cards {
		out[i] = c.mechanism
	}
	return out
}

// Catalogue returns a copy of the policy's catalogue.
func (p *Policy) Catalogue() []records.Card {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return cloneCatalogue(p.cat)
}

// Config returns the policy's configuration (with its current temperature).
func (p *Policy) Config() PolicyConfig {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.cfg
}

// SetTemperature sets the sampling temperature T > 0 for later calls of
// Propose (e.g. a lower temperature for evaluation).
func (p *Policy) SetTemperature(t float64) error {
	if !(t > 0) || math.IsInf(t, 0) {
		return fmt.Errorf("%w: temperature %g, want finite and > 0", ErrConfig, t)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg.Temperature = t
	return nil
}

// NumParams returns the number of trainable parameters.
func (p *Policy) NumParams() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.lay.nParams
}

// ready reports ErrNotInitialised for a zero Policy.
func (p *Policy) ready() error {
	if len(p.lay.heads) == 0 {
		return ErrNotInitialised
	}
	return nil
}

func cloneCatalogue(cat []records.Card) []records.Card {
	out := make([]records.Card, len(cat))
	for i, c := range cat {
		out[i] = c
		out[i].Params = make([]records.ParamSpec, len(c.Params))
		for j, ps := range c.Params {
			out[i].Params[j] = ps
			out[i].Params[j].Choices = append([]string(nil), ps.Choices...)
		}
		if c.Params == nil {
			out[i].Params = nil
		}
		if c.Prior != nil {
			pr := *c.Prior
			out[i].Prior = &pr
		}
	}
	return out
}
