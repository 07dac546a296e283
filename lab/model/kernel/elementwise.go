package kernel

import "math"

// Tanh32 is a float32 rational approximation of tanh (the [13/6] minimax
// form used by Eigen; maximum error a few float32 ulps), much cheaper than
// math.Tanh in float64. Library choice: tanh is the default activation and
// was the largest cost of a reference run.
func Tanh32(x float32) float32 {
	const (
		clampAt = 7.90531110763549805
		a1      = 4.89352455891786e-03
		a3      = 6.37261928875436e-04
		a5      = 1.48572235717979e-05
		a7      = 5.12229709037114e-08
		a9      = -8.60467152213735e-11
		a11     = 2.00018790482477e-13
		a13     = -2.76076847742355e-16
		b0      = 4.89352518554385e-03
		b2      = 2.26843463243900e-03
		b4      = 1.18534705686654e-04
		b6      = 1.19825839466702e-06
	)
	if x != x {
		return x
	}
	x = min(max(x, -clampAt), clampAt)
	if x > -0.0004 && x < 0.0004 {
		return x
	}
	x2 := x * x
	p := x2*a13 + a11
	p = x2*p + a9
	p = x2*p + a7
	p = x2*p + a5
	p = x2*p + a3
	p = x2*p + a1
	p = x * p
	q := x2*b6 + b4
	q = x2*q + b2
	q = x2*q + b0
	return p / q
}

// Exp32 is e^x in float32 for x ≤ 0 (Cephes expf: x = n·ln2 + r, a degree-6
// polynomial for e^r, then scaling by 2^n), about 2 ulps; it returns 0 below
// −87.3 and for −Inf. Library choice: math.Exp in float64 was a large share
// of a run's time.
func Exp32(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		c1    = 0.693359375
		c2    = -2.12194440e-4
	)
	if !(x >= -87.3) { // also −Inf and NaN → 0
		if x != x {
			return x
		}
		return 0
	}
	t := x*log2e + 0.5
	n := float32(int32(t)) // n = floor(t): int32 truncates towards zero
	if n > t {
		n--
	}
	r := x - n*c1 - n*c2
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	p = p*r*r + r + 1
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}

// Tanh sets dst[i] = Tanh32(src[i]).
func (k *Kernel) Tanh(dst, src []float32) { k.impl.tanh(dst, src[:len(dst)]) }

// TanhBackward sets d[i] *= 1 − a[i]², the derivative of tanh at the input
// whose output is a.
func (k *Kernel) TanhBackward(d, a []float32) { k.impl.tanhBwd(d, a[:len(d)]) }

// ExpShift sets z[i] = Exp32(z[i] − shift) for z[i] ≤ shift and returns
// the sum of the results.
func (k *Kernel) ExpShift(z []float32, shift float32) float64 { return k.impl.expShift(z, shift) }

// Adam applies Adam's update to p from gradient g with moments m and v:
// m ← β1·m + (1−β1)·g, v ← β2·v + (1−β2)·g², p ← p − a·m / (√(v·ivc2) + ε),
// where a is the learning rate over 1 − β1ᵗ and ivc2 = 1/(1 − β2ᵗ).
func (k *Kernel) Adam(p, g, m, v []float32, a, ivc2, b1, b2, eps float32) {
	k.impl.adam(p, g[:len(p)], m[:len(p)], v[:len(p)], a, ivc2, b1, b2, eps)
}

// AddTo sets dst[i] += src[i].
func (k *Kernel) AddTo(dst, src []float32) { k.impl.addTo(dst, src[:len(dst)]) }

func addToGo(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

func tanhGo(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] = Tanh32(v)
	}
}

func tanhBwdGo(d, a []float32) {
	a = a[:len(d)]
	for i, v := range a {
		d[i] *= 1 - v*v
	}
}

func expShiftGo(z []float32, shift float32) float64 {
	var sum float64
	for i, v := range z {
		e := Exp32(v - shift)
		z[i] = e
		sum += float64(e)
	}
	return sum
}

func adamGo(p, g, m, v []float32, a, ivc2, b1, b2, eps float32) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	c1, c2 := 1-b1, 1-b2
	for i := range p {
		gi := g[i]
		mi := b1*m[i] + c1*gi
		vi := b2*v[i] + c2*gi*gi
		m[i], v[i] = mi, vi
		p[i] -= a * mi / (float32(math.Sqrt(float64(vi*ivc2))) + eps)
	}
}

func (goImpl) addTo(dst, src []float32)                { addToGo(dst, src) }
func (goImpl) tanh(dst, src []float32)                 { tanhGo(dst, src) }
func (goImpl) tanhBwd(d, a []float32)                  { tanhBwdGo(d, a) }
func (goImpl) expShift(z []float32, s float32) float64 { return expShiftGo(z, s) }
func (goImpl) adam(p, g, m, v []float32, a, ivc2, b1, b2, eps float32) {
	adamGo(p, g, m, v, a, ivc2, b1, b2, eps)
}
