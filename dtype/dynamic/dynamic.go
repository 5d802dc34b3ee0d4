// Package dynamic holds bitsandbytes' dynamic 8-bit data types (Dettmers
// 2015, "8-bit approximations for parallelism in deep learning") and the
// blockwise quantization that bitsandbytes' 8-bit optimizers keep their
// state in: 256 codes a type, one float32 absmax constant a block.
package dynamic

import (
	"math"
	"slices"
	"sort"
)

// BlockSize is the number of optimizer-state elements that share one
// absmax constant: bitsandbytes' 8-bit blockwise optimizers use 256 since
// version 0.45 (Optimizer2State.init_state, n // 256 blocks), 2048 before.
const BlockSize = 256

// Map is a dynamic 8-bit data type: the 256 values its codes stand for,
// sorted, in [-1, 1] (signed) or [0, 1] (unsigned), exact 0 and 1 among
// them.
type Map struct {
	name   string
	values [256]float32
	zero   uint8 // the code of 0
}

// Signed is bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7,
// total_bits=8), the type of Adam's first moment and of nf4-dq's nested
// absmax constants: for each exponent e in 0..6, the 2^e midpoints of
// torch.linspace(0.1, 1, 2^e+1) times 10^(e-6), with both signs, then 0
// and 1, sorted. Code 0 is -0.99297, code 127 is 0 and code 255 is 1.
var Signed = newMap("dynamic", true)

// Unsigned is create_dynamic_map(signed=False), the type of Adam's second
// moment: for each exponent e in 0..6, the 2^(e+1) midpoints of
// torch.linspace(0.1, 1, 2^(e+1)+1) times 10^(e-6), then 0 and 1, sorted.
// bitsandbytes' non-sign bits are 7 either way, so the fraction gets the
// sign's bit. Code 0 is 0 and code 255 is 1.
var Unsigned = newMap("udynamic", false)

// newMap builds the 8-bit map from Values.
func newMap(name string, signed bool) *Map {
	vals := Values(signed, 7)
	m := &Map{name: name}
	copy(m.values[:], vals)
	m.zero = uint8(slices.Index(vals, 0))
	return m
}

// Values is create_dynamic_map(signed, exponentBits, exponentBits+1), the
// map of bitsandbytes (7 exponent bits, 256 values) and of torchao's 4-bit
// optimizers (3, 16 values) as torch computes it in float32, bit for bit:
// for each exponent e in 0..exponentBits-1, the midpoints of
// torch.linspace(0.1, 1, k+1) (k = 2^e, or 2^(e+1) unsigned, the sign's
// bit going to the fraction) times 10^(e-exponentBits+1), with both signs
// when signed, then 0 and 1, sorted. Linspace is its CPU kernel (see
// linspace), the midpoints are in float32, and the product with the power
// of ten is rounded to float32.
func Values(signed bool, exponentBits int) []float32 {
	vals := []float32{0, 1}
	for e := range exponentBits {
		items := 1<<e + 1
		if !signed {
			items = 1<<(e+1) + 1
		}
		points := linspace(0.1, 1, items)
		scale := float32(math.Pow10(e - exponentBits + 1))
		for i := range len(points) - 1 {
			v := scale * ((points[i] + points[i+1]) / 2)
			vals = append(vals, v)
			if signed {
				vals = append(vals, -v)
			}
		}
	}
	slices.Sort(vals)
	return vals
}

// linspace is torch.linspace(start, end, n) in float32 on the CPU: start +
// step·i up to half way, end - step·(n-1-i) after, each a fused
// multiply-add. Done in float64, which holds these sums exactly for
// n ≤ 2^8, the float32 rounding is the only one.
func linspace(start, end float32, n int) []float32 {
	step := (end - start) / float32(n-1)
	out := make([]float32, n)
	for i := range out {
		if i < n/2 {
			out[i] = float32(math.FMA(float64(step), float64(i), float64(start)))
		} else {
			out[i] = float32(math.FMA(-float64(step), float64(n-1-i), float64(end)))
		}
	}
	return out
}

// Name is bitsandbytes' name of the map: "dynamic" or "udynamic".
func (m *Map) Name() string { return m.name }

// Values returns the 256 values, in code order.
func (m *Map) Values() *[256]float32 { return &m.values }

// Value returns the value code stands for.
func (m *Map) Value(code uint8) float32 { return m.values[code] }

// Nearest returns the code whose value is nearest x clamped to the map's
// range, by float32 distance, the lower code on a tie, and code 0 for NaN.
// This is the argmin of bitsandbytes' reference quantize_blockwise and the
// distance check of its CPU kernel (quantize_block in csrc/common.cpp);
// its CUDA kernels (dQuantize, quantize_2D) compare x with the float32
// midpoint of the two neighbours instead and send a tie to the neighbour
// their binary search ended on, which is not always the lower.
func (m *Map) Nearest(x float32) uint8 {
	if x != x {
		return 0
	}
	x = min(max(x, m.values[0]), 1)
	i := sort.Search(len(m.values), func(i int) bool { return m.values[i] >= x })
	if i == 0 || x-m.values[i-1] > m.values[i]-x {
		return uint8(i)
	}
	return uint8(i - 1)
}

// Blocks is the number of blocks of size elements that n elements fill,
// the last one partly; it panics unless size is positive.
func Blocks(n, size int) int {
	if size < 1 {
		panic("dynamic: block size must be positive")
	}
	return (n + size - 1) / size
}

// Quantize writes the codes of x to codes (len(x) of them) and the absmax
// of each block of size elements to absmax (Blocks(len(x), size) of them).
// A block's absmax is its largest |x|; each element x becomes
// m.Nearest(x/absmax), the quotient rounded to float32 once, as
// bitsandbytes' CPU kernel divides. Three cases bitsandbytes leaves to
// its kernels' arithmetic are fixed here:
//   - a zero block (absmax 0) takes the code of 0 throughout, so it
//     decodes to +0 (the kernels' 0/0 would give code 0, -1 in Signed);
//   - a subnormal absmax divides as any other (the CUDA kernels' reciprocal
//     overflows to +inf below 2^-126);
//   - a block holding NaN or ±inf has absmax NaN or +inf and decodes to
//     NaN or ±inf where it held one (and, for inf, NaN or 0 elsewhere):
//     a non-finite moment is a diverged run, kept visible rather than
//     zeroed. Training under a loss scaler never gets there: the step is
//     skipped on a non-finite gradient.
func Quantize(m *Map, x []float32, size int, codes []uint8, absmax []float32) {
	_ = codes[:len(x)]
	_ = absmax[:Blocks(len(x), size)]
	for b, start := 0, 0; start < len(x); b, start = b+1, start+size {
		block := x[start:min(start+size, len(x))]
		var amax float32
		for _, v := range block {
			a := float32(math.Abs(float64(v)))
			if a > amax || a != a {
				amax = a
			}
			if amax != amax {
				break
			}
		}
		absmax[b] = amax
		out := codes[start : start+len(block)]
		if amax == 0 {
			for i := range out {
				out[i] = m.zero
			}
			continue
		}
		for i, v := range block {
			out[i] = m.Nearest(v / amax)
		}
	}
}

// Dequantize writes to out (len(codes) of them) each code's value times its
// block's absmax, in float32, as bitsandbytes' dequantize_blockwise does.
func Dequantize(m *Map, codes []uint8, absmax []float32, size int, out []float32) {
	_ = out[:len(codes)]
	_ = absmax[:Blocks(len(codes), size)]
	for i, c := range codes {
		out[i] = m.values[c] * absmax[i/size]
	}
}
