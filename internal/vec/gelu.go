package vec

import "math"

// GELU sets cdf[i] = Φ(x[i]) and y[i] = x[i]·Φ(x[i]), computing as
// PyTorch's CUDA kernel does in float32:
//
//	c = 0.5·(1 + erf(x·√½)); cdf[i] = c; y[i] = x·c
//
// with erf32 for erff. With AVX-512 it runs eight elements at a time, and
// the last len(x)%8 in Go. y and cdf need len(x) elements; y may be x.
func GELU(y, cdf, x []float32) {
	y, cdf = y[:len(x)], cdf[:len(x)]
	n := 0
	if useAVX512 {
		n = len(x) &^ 7
		geluAVX512(y[:n], cdf[:n], x[:n])
	}
	geluGo(y[n:], cdf[n:], x[n:])
}

// GELUBackward sets dx[i] = dy[i]·(cdf[i] + x[i]·φ(x[i])), given GELU's
// cdf, computing as PyTorch's CUDA kernel does in float32:
//
//	pdf = exp(-0.5·x·x)·(1/√(2π)); dx[i] = dy[i]·(cdf[i] + x·pdf)
//
// with exp32 for expf. With AVX-512 it runs eight elements at a time, and
// the last len(x)%8 in Go. dx, cdf and dy need len(x) elements.
func GELUBackward(dx, x, cdf, dy []float32) {
	dx, cdf, dy = dx[:len(x)], cdf[:len(x)], dy[:len(x)]
	n := 0
	if useAVX512 {
		n = len(x) &^ 7
		geluBackwardAVX512(dx[:n], x[:n], cdf[:n], dy[:n])
	}
	geluBackwardGo(dx[n:], x[n:], cdf[n:], dy[n:])
}

// The float32 GELU kernels' constants, PyTorch's kAlpha and kBeta.
const (
	sqrtHalf   = math.Sqrt2 / 2
	invSqrt2Pi = 1 / (math.Sqrt2 * math.SqrtPi) // φ(0)
)

// geluGo is GELU in Go.
func geluGo(y, cdf, x []float32) {
	y, cdf = y[:len(x)], cdf[:len(x)]
	for i, v := range x {
		c := 0.5 * (1 + erf32(v*sqrtHalf))
		cdf[i], y[i] = c, v*c
	}
}

// geluBackwardGo is GELUBackward in Go. The explicit conversion rounds the
// product before it is added (see adamWGo).
func geluBackwardGo(dx, x, cdf, dy []float32) {
	dx, cdf, dy = dx[:len(x)], cdf[:len(x)], dy[:len(x)]
	for i, v := range x {
		pdf := exp32(-0.5*v*v) * invSqrt2Pi
		dx[i] = dy[i] * (cdf[i] + float32(v*pdf))
	}
}

// erf32 and exp32 are the float32 erf and exp of the float32 compute path,
// faster than math.Erf and math.Exp. They evaluate in float64, which costs
// Go's scalar code nothing over float32 and leaves only the approximation
// error (relative error under 2.1e-9, about 1/30 of a float32 ulp) before
// the one rounding to float32: over every float32, each result is within
// 1 ulp of the correctly rounded one.
//
// Their polynomials are minimax fits (Lawson's reweighted least squares
// against mpmath, coefficients rounded to float64) of the relative error
// of the function each approximates. They are evaluated by Estrin's
// scheme, whose dependency chains, half as long as Horner's, let the loops
// that call these overlap elements. Each product is converted explicitly
// so that the compiler cannot fuse it with the sum it feeds (see adamWGo):
// the assembly kernels round each operation, and must give the same bits.

// erf32 returns erf(x).
func erf32(x float32) float32 {
	v := float64(x)
	if math.Abs(v) >= 2 { // rare for activations (GELU's |x| ≥ 2√2): predicts well
		return erfTail(v)
	}
	// erf(x) = x·P(x²) on |x| < 2.
	s := v * v
	s2 := s * s
	s4 := s2 * s2
	p := 1.1283791664417209 - float64(0.3761263518835721*s) +
		float64(s2*(0.11283755990707395-float64(0.02686481255690162*s))) +
		float64(s4*(0.005221287833968101-float64(0.0008516772663351691*s)+
			float64(s2*(0.00011820274925197684-float64(1.3771846605781235e-05*s))))) +
		float64(s4*s4*(1.2670767072647804e-06-float64(8.016638471108894e-08*s)+float64(2.5346048038166202e-09*s2)))
	return float32(v * p)
}

// From erfOne on, erf is within a quarter ulp of 1 and rounds to 1.
const erfOne = 4

// erfTail returns erf(x) for |x| ≥ 2, as ±(1 - e^Q) with Q a fit of log
// erfc: the error stays relative to erfc, all that is left of 1 - erf.
func erfTail(v float64) float32 {
	// log erfc(|x|) = Q(t) with t = |x| - 3 on [2, erfOne].
	t := min(math.Abs(v), erfOne) - 3
	t2 := t * t
	q := -10.720362045420515 - float64(6.303629848490578*t) +
		float64(t2*(-0.9567130311475927-float64(0.00606838345915417*t))) +
		float64(t2*t2*0.002435485561656403)
	return float32(math.Copysign(1-expKernel(q), v))
}

// Past expMin e^x is under half the smallest float32 subnormal and
// rounds to 0; past expMax it overflows to +Inf. Clamping to them keeps
// expKernel's power of two within float64's range. exp32 clamps with
// branches, which predict well: min and max would add their handling of
// NaN and -0 to every element's dependency chain.
const (
	expMin = -104
	expMax = 89
)

// exp32 returns e^x.
func exp32(x float32) float32 {
	v := float64(x)
	if v < expMin {
		v = expMin
	} else if v > expMax {
		v = expMax
	}
	return float32(expKernel(v))
}

// roundShift added to and then subtracted from |y| < 2^51 rounds y to the
// nearest integer, without a branch or a call.
const roundShift = 0x1.8p52

// expKernel returns e^v to a relative error of 2.1e-9 for v in [expMin,
// expMax], and NaN for NaN: v = k·ln2 + r with integer k and |r| ≤ ln2/2,
// and e^v = 2^k·e^r.
func expKernel(v float64) float64 {
	k := float64(v*math.Log2E) + roundShift - roundShift
	r := v - float64(k*math.Ln2)
	r2 := r * r
	er := 1 + float64(1.0000000321882179*r) +
		float64(r2*(0.49999994205971504+float64(0.16666431157752767*r))) +
		float64(r2*r2*(0.041668002448510266+float64(0.008374164148689932*r)+float64(0.0013843652326738943*r2)))
	return er * math.Float64frombits(uint64(int64(k)+1023)<<52)
}
