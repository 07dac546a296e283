package model

import (
	"math"

	"github.com/lm2lm/lm2lm/lab/model/kernel"
)

// optimizer updates the flat parameter vector from the flat gradient.
type optimizer struct {
	cfg     Config
	tensors []tensor
	m, v    []float32 // first and second moments (v only for Adam)
	t       int       // steps taken
	k       *kernel.Kernel
}

func newOptimizer(cfg Config, tensors []tensor, n int, k *kernel.Kernel) *optimizer {
	o := &optimizer{cfg: cfg, tensors: tensors, k: k}
	switch cfg.Optimizer {
	case "adam", "adamw":
		o.m, o.v = make([]float32, n), make([]float32, n)
	case "momentum", "lion":
		o.m = make([]float32, n)
	}
	return o
}

// lrAt is the learning rate of step s (0-based): linear warm-up over Warmup
// steps to LR, then the schedule: constant; cosine or linear decay to
// MinLRFrac·LR over the remaining steps; or WSD (warm-up, stable, decay):
// constant until the last DecayFrac of the steps, then linear decay to
// MinLRFrac·LR.
func lrAt(c Config, s int) float64 {
	if s < c.Warmup {
		return c.LR * float64(s+1) / float64(c.Warmup)
	}
	m := c.MinLRFrac
	switch c.Schedule {
	case "cosine", "linear":
		span := c.Steps - c.Warmup
		if span <= 0 {
			return c.LR
		}
		p := float64(s-c.Warmup) / float64(span)
		if c.Schedule == "cosine" {
			return c.LR * (m + (1-m)*0.5*(1+math.Cos(math.Pi*p)))
		}
		return c.LR * (1 - (1-m)*p)
	case "wsd":
		start := max(c.Steps-int(math.Round(c.DecayFrac*float64(c.Steps))), c.Warmup)
		if s < start {
			return c.LR
		}
		p := float64(s-start) / float64(c.Steps-start)
		return c.LR * (1 - (1-m)*p)
	}
	return c.LR
}

// clipGrads scales g so that its global L2 norm is at most clip (0 = off)
// and returns the norm before clipping (0 without computing it when off).
func clipGrads(g []float32, clip float64) float64 {
	if clip == 0 {
		return 0
	}
	var ss float64
	for _, v := range g {
		ss += float64(v) * float64(v)
	}
	norm := math.Sqrt(ss)
	if clip > 0 && norm > clip {
		s := float32(clip / norm)
		for i := range g {
			g[i] *= s
		}
	}
	return norm
}

// step applies one update with learning rate lr. Weight decay is decoupled
// (p ← p − lr·λ·p) for adamw and lion and an L2 term (g ← g + λ·p) for adam,
// sgd and momentum; it applies to embeddings and weight matrices only.
func (o *optimizer) step(p, g []float32, lr float64) {
	o.t++
	c := o.cfg
	wd := float32(c.WeightDecay)
	for _, t := range o.tensors {
		pt, gt := t.of(p), t.of(g)
		if !t.decay || wd == 0 {
			o.update(pt, gt, t.off, lr, 0, 0)
			continue
		}
		switch c.Optimizer {
		case "adamw", "lion":
			o.update(pt, gt, t.off, lr, 0, wd)
		default:
			o.update(pt, gt, t.off, lr, wd, 0)
		}
	}
}

// update updates one tensor at offset off with L2 coefficient l2 and
// decoupled decay dec.
func (o *optimizer) update(p, g []float32, off int, lr float64, l2, dec float32) {
	c := o.cfg
	g = g[:len(p)]
	lrf := float32(lr)
	if l2 != 0 {
		for i := range g {
			g[i] += l2 * p[i]
		}
	}
	if dec != 0 {
		f := 1 - lrf*dec
		for i := range p {
			p[i] *= f
		}
	}
	switch c.Optimizer {
	case "adam", "adamw":
		b1, b2 := float32(c.Beta1), float32(c.Beta2)
		bc1 := float32(1 - math.Pow(c.Beta1, float64(o.t)))
		bc2 := float32(1 - math.Pow(c.Beta2, float64(o.t)))
		o.k.Adam(p, g, o.m[off:off+len(p)], o.v[off:off+len(p)], lrf/bc1, 1/bc2, b1, b2, float32(c.AdamEps))
	case "sgd":
		for i := range p {
			p[i] -= lrf * g[i]
		}
	case "momentum":
		m := o.m[off : off+len(p)]
		b1 := float32(c.Beta1)
		for i := range p {
			m[i] = b1*m[i] + g[i]
			p[i] -= lrf * m[i]
		}
	case "lion":
		m := o.m[off : off+len(p)]
		b1, b2 := float32(c.Beta1), float32(c.Beta2)
		for i := range p {
			u := b1*m[i] + (1-b1)*g[i]
			switch {
			case u > 0:
				p[i] -= lrf
			case u < 0:
				p[i] += lrf
			}
			m[i] = b2*m[i] + (1-b2)*g[i]
		}
	}
}
