package model

import (
	"math"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm/lab/model/kernel"
)

// normEps is ε inside layernorm and rmsnorm; library choice (the usual 1e-5).
const normEps = 1e-5

// tensor is a named view into the flat parameter vector.
type tensor struct {
	off, n int
	decay  bool // weight decay applies (matrices and embeddings, not biases or gains)
}

func (t tensor) of(v []float32) []float32 { return v[t.off : t.off+t.n] }

// layer is one hidden layer: z = x·W + b, n = norm(z), a = act(n),
// h = dropout(a) (+ x when residual).
type layer struct {
	in, out  int
	residual bool
	w, b     tensor
	g, beta  tensor // norm gain and bias (beta only for layernorm)

	x          []float32 // input, B×in (the previous layer's h or the embeddings)
	z          []float32 // pre-norm, B×out
	xhat, rstd []float32 // normalised z (B×out) and 1/σ per row (B)
	n          []float32 // activation input, B×out (aliases z without norm)
	a          []float32 // activation output, B×out
	drop       []float32 // dropout multipliers (0 or 1/(1−p)), B×out
	h          []float32 // output, B×out (aliases a without dropout or residual)
	dx         []float32 // gradient w.r.t. x, B×in
	dz         []float32 // scratch gradient, B×out
}

// net is the MLP LM of one Config with its parameters, gradients and
// activation buffers for up to maxB windows. Not safe for concurrent use.
type net struct {
	cfg     Config
	k       *kernel.Kernel
	params  []float32
	grads   []float32
	tensors []tensor
	emb     tensor
	layers  []layer
	wo, bo  tensor
	inW     int // Context·Embed
	P       int // predicted positions per window (outPositions)
	lastW   int // width feeding the output layer
	maxB    int

	sym []int32   // B×Context input symbols
	x0  []float32 // gathered embeddings, B×inW

	// The output layer works on "rows": (window, position) pairs whose
	// prediction is needed, ordered by position then window, so that each
	// position's rows are contiguous and share that position's output
	// matrix. With P = 1 the rows are the windows themselves. For masked
	// diffusion only masked positions are rows, which skips the output
	// work of visible positions.
	nrows  int
	rowB   []int32   // row → window
	rowP   []int32   // row → position
	posOff []int     // position p's rows are posOff[p]..posOff[p+1]−1
	hg     []float32 // rows' hidden vectors gathered (P > 1), rows×lastW
	dhg    []float32 // their gradients (P > 1)
	logits []float32 // rows×Vocab; softmax probabilities after loss
	dlog   []float32 // rows×Vocab
	dlast  []float32 // gradient w.r.t. the output layer's input, B×lastW
}

// newNet returns the network of cfg for up to maxB windows, its
// parameters drawn from rng (initParams).
func newNet(cfg Config, k *kernel.Kernel, maxB int, rng *rand.Rand) *net {
	m := &net{cfg: cfg, k: k, maxB: maxB}
	m.inW = cfg.Context * cfg.Embed
	m.P = cfg.outPositions()
	total := m.layOut()
	m.params = make([]float32, total)
	m.grads = make([]float32, total)
	m.initParams(rng)
	m.allocBuffers()
	return m
}

// layOut places the parameter tensors in the flat vector (the embedding,
// each layer's W, b and norm gain and bias, the output layer's P blocks of
// lastW×Vocab and its biases), sets the layers' shapes and returns the
// number of parameters.
func (m *net) layOut() int {
	cfg := m.cfg
	total := 0
	alloc := func(n int, decay bool) tensor {
		t := tensor{off: total, n: n, decay: decay}
		total += n
		m.tensors = append(m.tensors, t)
		return t
	}
	m.emb = alloc(cfg.inputVocab()*cfg.Embed, true)
	width := m.inW
	for l := 0; l < cfg.Layers; l++ {
		ly := layer{in: width, out: cfg.Hidden, residual: cfg.Residual && l > 0 && width == cfg.Hidden}
		ly.w = alloc(width*cfg.Hidden, true)
		ly.b = alloc(cfg.Hidden, false)
		if cfg.Norm != "none" {
			ly.g = alloc(cfg.Hidden, false)
			if cfg.Norm == "layernorm" {
				ly.beta = alloc(cfg.Hidden, false)
			}
		}
		m.layers = append(m.layers, ly)
		width = cfg.Hidden
	}
	m.lastW = width
	m.wo = alloc(m.P*width*cfg.Vocab, true) // P blocks of lastW×Vocab
	m.bo = alloc(m.P*cfg.Vocab, false)
	return total
}

// initParams draws the initial parameters from rng: N(0,
// (InitScale/√fan_in)²) for matrices, N(0, InitScale²) for the embedding,
// zero biases, unit gains.
func (m *net) initParams(rng *rand.Rand) {
	s := m.cfg.InitScale
	fill := func(t tensor, std float64) {
		v := t.of(m.params)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * std)
		}
	}
	fill(m.emb, s)
	for i := range m.layers {
		ly := &m.layers[i]
		fill(ly.w, s/math.Sqrt(float64(ly.in)))
		if ly.g.n > 0 {
			for j := range ly.g.of(m.params) {
				ly.g.of(m.params)[j] = 1
			}
		}
	}
	fill(m.wo, s/math.Sqrt(float64(m.lastW)))
}

// allocBuffers makes the activation and gradient buffers for up to maxB
// windows, aliasing where a step is the identity (no norm, no dropout,
// no residual), and chains each layer's input to the previous layer's
// output.
func (m *net) allocBuffers() {
	cfg, maxB := m.cfg, m.maxB
	m.sym = make([]int32, maxB*cfg.Context)
	m.x0 = make([]float32, maxB*m.inW)
	rows := maxB * m.P
	m.rowB, m.rowP, m.posOff = make([]int32, rows), make([]int32, rows), make([]int, m.P+1)
	if m.P > 1 {
		m.hg, m.dhg = make([]float32, rows*m.lastW), make([]float32, rows*m.lastW)
	}
	m.logits = make([]float32, rows*cfg.Vocab)
	m.dlog = make([]float32, rows*cfg.Vocab)
	m.dlast = make([]float32, maxB*m.lastW)
	for i := range m.layers {
		ly := &m.layers[i]
		bo := maxB * ly.out
		ly.z = make([]float32, bo)
		ly.n = ly.z
		if cfg.Norm != "none" {
			ly.xhat = make([]float32, bo)
			ly.rstd = make([]float32, maxB)
			ly.n = make([]float32, bo)
		}
		ly.a = make([]float32, bo)
		ly.h = ly.a
		if cfg.Dropout > 0 {
			ly.drop = make([]float32, bo)
		}
		if cfg.Dropout > 0 || ly.residual {
			ly.h = make([]float32, bo)
		}
		ly.dx = make([]float32, maxB*ly.in)
		ly.dz = make([]float32, bo)
	}
	for i := range m.layers {
		if i == 0 {
			m.layers[i].x = m.x0
		} else {
			m.layers[i].x = m.layers[i-1].h
		}
	}
}

// lastH is the input of the output layer.
func (m *net) lastH() []float32 {
	if len(m.layers) == 0 {
		return m.x0
	}
	return m.layers[len(m.layers)-1].h
}

// forward computes the logits of the output rows (see setRows) of the
// first B windows of m.sym. With drop non-nil, dropout is applied
// (training).
func (m *net) forward(B int, drop *rand.Rand) {
	m.embed(B)
	for li := range m.layers {
		m.layerForward(&m.layers[li], B, drop)
	}
	m.outputForward()
}

// embed gathers the embeddings of the first B windows' symbols into x0.
func (m *net) embed(B int) {
	E, C := m.cfg.Embed, m.cfg.Context
	emb := m.emb.of(m.params)
	for b := 0; b < B; b++ {
		row := m.x0[b*m.inW : (b+1)*m.inW]
		for i := 0; i < C; i++ {
			s := int(m.sym[b*C+i])
			copy(row[i*E:(i+1)*E], emb[s*E:(s+1)*E])
		}
	}
}

// layerForward computes hidden layer ly's z, norm, activation and output
// h for B windows; with drop non-nil it draws the dropout multipliers
// from it.
func (m *net) layerForward(ly *layer, B int, drop *rand.Rand) {
	cfg := m.cfg
	H := ly.out
	z := ly.z[:B*H]
	m.k.MulNN(z, ly.x[:B*ly.in], ly.w.of(m.params), B, ly.in, H, false)
	bias := ly.b.of(m.params)
	for b := 0; b < B; b++ {
		m.k.AddTo(z[b*H:(b+1)*H], bias)
	}
	n := ly.n[:B*H]
	switch cfg.Norm {
	case "layernorm":
		layerNormFwd(n, ly.xhat, ly.rstd, z, ly.g.of(m.params), ly.beta.of(m.params), B, H)
	case "rmsnorm":
		rmsNormFwd(n, ly.xhat, ly.rstd, z, ly.g.of(m.params), B, H)
	}
	a := ly.a[:B*H]
	if cfg.Activation == "tanh" {
		m.k.Tanh(a, n)
	} else {
		actFwd(cfg.Activation, a, n)
	}
	h := ly.h[:B*H]
	if cfg.Dropout > 0 {
		d := ly.drop[:B*H]
		if drop != nil {
			p, keep := float32(cfg.Dropout), float32(1/(1-cfg.Dropout))
			for i := range d {
				if drop.Float32() < p {
					d[i] = 0
				} else {
					d[i] = keep
				}
			}
			for i := range h {
				h[i] = a[i] * d[i]
			}
		} else {
			copy(h, a)
		}
	}
	if ly.residual {
		if cfg.Dropout == 0 {
			copy(h, a)
		}
		m.k.AddTo(h, ly.x[:B*H])
	}
}

// outputForward computes the logits of the output rows from the last
// hidden layer, each position's rows with that position's output matrix.
func (m *net) outputForward() {
	V, W := m.cfg.Vocab, m.lastW
	h := m.lastH()
	if m.P > 1 {
		for r := 0; r < m.nrows; r++ {
			b := int(m.rowB[r])
			copy(m.hg[r*W:(r+1)*W], h[b*W:(b+1)*W])
		}
		h = m.hg
	}
	wo, bo := m.wo.of(m.params), m.bo.of(m.params)
	for p := 0; p < m.P; p++ {
		r0, r1 := m.posOff[p], m.posOff[p+1]
		if r0 == r1 {
			continue
		}
		lo := m.logits[r0*V : r1*V]
		m.k.MulNN(lo, h[r0*W:r1*W], wo[p*W*V:(p+1)*W*V], r1-r0, W, V, false)
		bp := bo[p*V : (p+1)*V]
		for r := 0; r < r1-r0; r++ {
			m.k.AddTo(lo[r*V:(r+1)*V], bp)
		}
	}
}

// setRows makes the output rows the (window, position) pairs with
// active[b·P+p] among the first B windows (all windows when active is nil
// and P = 1).
func (m *net) setRows(B int, active []bool) {
	n := 0
	for p := 0; p < m.P; p++ {
		m.posOff[p] = n
		for b := 0; b < B; b++ {
			if active == nil || active[b*m.P+p] {
				m.rowB[n], m.rowP[n] = int32(b), int32(p)
				n++
			}
		}
	}
	m.posOff[m.P] = n
	m.nrows = n
}

// backward accumulates into m.grads the gradient of the loss whose
// gradient w.r.t. the output rows' logits is in m.dlog, for the B windows
// of the last forward pass.
func (m *net) backward(B int) {
	cfg := m.cfg
	V, W := cfg.Vocab, m.lastW
	h, dhr := m.lastH(), m.dlast
	if m.P > 1 {
		h, dhr = m.hg, m.dhg
	}
	wo, gwo, gbo := m.wo.of(m.params), m.wo.of(m.grads), m.bo.of(m.grads)
	for p := 0; p < m.P; p++ {
		r0, r1 := m.posOff[p], m.posOff[p+1]
		if r0 == r1 {
			continue
		}
		dl := m.dlog[r0*V : r1*V]
		m.k.MulTN(gwo[p*W*V:(p+1)*W*V], h[r0*W:r1*W], dl, W, r1-r0, V, true)
		gb := gbo[p*V : (p+1)*V]
		for r := 0; r < r1-r0; r++ {
			m.k.AddTo(gb, dl[r*V:(r+1)*V])
		}
		m.k.MulNT(dhr[r0*W:r1*W], dl, wo[p*W*V:(p+1)*W*V], r1-r0, V, W, false)
	}
	dh := m.dlast[:B*W]
	if m.P > 1 {
		clear(dh)
		for r := 0; r < m.nrows; r++ {
			b := int(m.rowB[r])
			m.k.AddTo(dh[b*W:(b+1)*W], m.dhg[r*W:(r+1)*W])
		}
	}
	for li := len(m.layers) - 1; li >= 0; li-- {
		ly := &m.layers[li]
		H := ly.out
		dz := ly.dz[:B*H]
		if cfg.Dropout > 0 {
			d := ly.drop[:B*H]
			for i := range dz {
				dz[i] = dh[i] * d[i]
			}
		} else {
			copy(dz, dh)
		}
		if cfg.Activation == "tanh" {
			m.k.TanhBackward(dz, ly.a[:B*H])
		} else {
			actBwd(cfg.Activation, dz, ly.n[:B*H], ly.a[:B*H])
		}
		switch cfg.Norm {
		case "layernorm":
			layerNormBwd(dz, ly.xhat, ly.rstd, ly.g.of(m.params), ly.g.of(m.grads), ly.beta.of(m.grads), B, H)
		case "rmsnorm":
			rmsNormBwd(dz, ly.xhat, ly.rstd, ly.g.of(m.params), ly.g.of(m.grads), B, H)
		}
		gb := ly.b.of(m.grads)
		for b := 0; b < B; b++ {
			m.k.AddTo(gb, dz[b*H:(b+1)*H])
		}
		m.k.MulTN(ly.w.of(m.grads), ly.x[:B*ly.in], dz, ly.in, B, H, true)
		dx := ly.dx[:B*ly.in]
		m.k.MulNT(dx, dz, ly.w.of(m.params), B, H, ly.in, false)
		if ly.residual {
			m.k.AddTo(dx, dh)
		}
		dh = dx
	}
	// dh is now the gradient w.r.t. the gathered embeddings.
	E, C := cfg.Embed, cfg.Context
	gemb := m.emb.of(m.grads)
	for b := 0; b < B; b++ {
		row := dh[b*m.inW : (b+1)*m.inW]
		for i := 0; i < C; i++ {
			s := int(m.sym[b*C+i])
			m.k.AddTo(gemb[s*E:(s+1)*E], row[i*E:(i+1)*E])
		}
	}
}

func layerNormFwd(n, xhat, rstd, z, g, beta []float32, B, H int) {
	for b := 0; b < B; b++ {
		zr := z[b*H : (b+1)*H]
		var mean float64
		for _, v := range zr {
			mean += float64(v)
		}
		mean /= float64(H)
		var vr float64
		for _, v := range zr {
			d := float64(v) - mean
			vr += d * d
		}
		vr /= float64(H)
		rs := float32(1 / math.Sqrt(vr+normEps))
		rstd[b] = rs
		xr, nr := xhat[b*H:(b+1)*H], n[b*H:(b+1)*H]
		mf := float32(mean)
		for i, v := range zr {
			xh := (v - mf) * rs
			xr[i] = xh
			nr[i] = g[i]*xh + beta[i]
		}
	}
}

// layerNormBwd turns dn (in d, B×H) into dz in place and accumulates the
// gain and bias gradients.
func layerNormBwd(d, xhat, rstd, g, dg, dbeta []float32, B, H int) {
	for b := 0; b < B; b++ {
		dr, xr := d[b*H:(b+1)*H], xhat[b*H:(b+1)*H]
		var s1, s2 float64
		for i, dv := range dr {
			dg[i] += dv * xr[i]
			dbeta[i] += dv
			dx := float64(dv * g[i])
			s1 += dx
			s2 += dx * float64(xr[i])
		}
		m1, m2 := float32(s1/float64(H)), float32(s2/float64(H))
		rs := rstd[b]
		for i, dv := range dr {
			dr[i] = rs * (dv*g[i] - m1 - xr[i]*m2)
		}
	}
}

func rmsNormFwd(n, xhat, rstd, z, g []float32, B, H int) {
	for b := 0; b < B; b++ {
		zr := z[b*H : (b+1)*H]
		var ms float64
		for _, v := range zr {
			ms += float64(v) * float64(v)
		}
		rs := float32(1 / math.Sqrt(ms/float64(H)+normEps))
		rstd[b] = rs
		xr, nr := xhat[b*H:(b+1)*H], n[b*H:(b+1)*H]
		for i, v := range zr {
			xh := v * rs
			xr[i] = xh
			nr[i] = g[i] * xh
		}
	}
}

func rmsNormBwd(d, xhat, rstd, g, dg []float32, B, H int) {
	for b := 0; b < B; b++ {
		dr, xr := d[b*H:(b+1)*H], xhat[b*H:(b+1)*H]
		var s2 float64
		for i, dv := range dr {
			dg[i] += dv * xr[i]
			s2 += float64(dv*g[i]) * float64(xr[i])
		}
		m2 := float32(s2 / float64(H))
		rs := rstd[b]
		for i, dv := range dr {
			dr[i] = rs * (dv*g[i] - xr[i]*m2)
		}
	}
}

// gelu uses the tanh approximation of Hendrycks & Gimpel (library choice:
// the form GPT-2 uses).
const geluC = 0.7978845608028654 // √(2/π)

func actFwd(name string, a, n []float32) {
	n = n[:len(a)]
	switch name {
	case "tanh":
		for i, v := range n {
			a[i] = kernel.Tanh32(v)
		}
	case "relu":
		for i, v := range n {
			a[i] = max(v, 0)
		}
	case "gelu":
		for i, v := range n {
			x := float64(v)
			a[i] = float32(0.5 * x * (1 + math.Tanh(geluC*(x+0.044715*x*x*x))))
		}
	case "silu":
		for i, v := range n {
			x := float64(v)
			a[i] = float32(x / (1 + math.Exp(-x)))
		}
	}
}

// actBwd multiplies d in place by the activation's derivative at n (a is
// the forward output).
func actBwd(name string, d, n, a []float32) {
	n, a = n[:len(d)], a[:len(d)]
	switch name {
	case "tanh":
		for i, v := range a {
			d[i] *= 1 - v*v
		}
	case "relu":
		for i, v := range n {
			if v <= 0 {
				d[i] = 0
			}
		}
	case "gelu":
		for i, v := range n {
			x := float64(v)
			t := math.Tanh(geluC * (x + 0.044715*x*x*x))
			dv := 0.5*(1+t) + 0.5*x*(1-t*t)*geluC*(1+3*0.044715*x*x)
			d[i] *= float32(dv)
		}
	case "silu":
		for i, v := range n {
			x := float64(v)
			s := 1 / (1 + math.Exp(-x))
			d[i] *= float32(s * (1 + x*(1-s)))
		}
	}
}
