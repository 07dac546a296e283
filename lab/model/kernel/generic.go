package kernel

// goImpl is the portable pure-Go backend: row-blocked loops that the Go
// compiler turns into scalar SSE code.
type goImpl struct{}

func (goImpl) name() string { return "go" }

func (goImpl) nn(c, a, b []float32, m, k, n int, acc bool) { nnGo(c, a, b, m, k, n, acc) }

func nnGo(c, a, b []float32, m, k, n int, acc bool) {
	if !acc {
		clear(c)
	}
	i := 0
	for ; i+4 <= m; i += 4 {
		c0 := c[i*n : i*n+n]
		c1 := c[(i+1)*n : (i+1)*n+n]
		c2 := c[(i+2)*n : (i+2)*n+n]
		c3 := c[(i+3)*n : (i+3)*n+n]
		for p := 0; p < k; p++ {
			a0, a1, a2, a3 := a[i*k+p], a[(i+1)*k+p], a[(i+2)*k+p], a[(i+3)*k+p]
			br := b[p*n : p*n+n]
			for j, bv := range br {
				c0[j] += a0 * bv
				c1[j] += a1 * bv
				c2[j] += a2 * bv
				c3[j] += a3 * bv
			}
		}
	}
	for ; i < m; i++ {
		ci := c[i*n : i*n+n]
		for p := 0; p < k; p++ {
			av := a[i*k+p]
			br := b[p*n : p*n+n]
			for j, bv := range br {
				ci[j] += av * bv
			}
		}
	}
}

func (goImpl) tn(c, a, b []float32, m, k, n int, acc bool, _ *[]float32) {
	if !acc {
		clear(c)
	}
	p := 0
	for ; p+4 <= k; p += 4 {
		a0 := a[p*m : p*m+m]
		a1 := a[(p+1)*m : (p+1)*m+m]
		a2 := a[(p+2)*m : (p+2)*m+m]
		a3 := a[(p+3)*m : (p+3)*m+m]
		b0 := b[p*n : p*n+n]
		b1 := b[(p+1)*n : (p+1)*n+n]
		b2 := b[(p+2)*n : (p+2)*n+n]
		b3 := b[(p+3)*n : (p+3)*n+n]
		for i := 0; i < m; i++ {
			v0, v1, v2, v3 := a0[i], a1[i], a2[i], a3[i]
			ci := c[i*n : i*n+n]
			for j := range ci {
				ci[j] += v0*b0[j] + v1*b1[j] + v2*b2[j] + v3*b3[j]
			}
		}
	}
	for ; p < k; p++ {
		ap := a[p*m : p*m+m]
		bp := b[p*n : p*n+n]
		for i, v := range ap {
			ci := c[i*n : i*n+n]
			for j, bv := range bp {
				ci[j] += v * bv
			}
		}
	}
}

// nt transposes B into scratch and multiplies; the row-blocked nn loop is
// faster than dot products in pure Go.
func (goImpl) nt(c, a, b []float32, m, k, n int, acc bool, scratch *[]float32) {
	bt := grow(scratch, k*n)
	transpose(bt, b, n, k)
	nnGo(c, a, bt, m, k, n, acc)
}
