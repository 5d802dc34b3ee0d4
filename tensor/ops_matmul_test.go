package tensor_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// The GEMM rows of TestOps: MatMul (batched, shared B, every
// transposition), Linear and the scaled FP8 GEMM. A dot product of k terms
// in the compute type is within γ_k·Σ|terms| of the exact one whatever the
// order of accumulation (see gamma), so the bound holds for every kernel
// (packed, direct, split between goroutines, bf16 pairs).

// parallelGEMM is m, k, n with m·n·k above gemm's smallMax (2^21): the
// product is packed and split between goroutines.
var parallelGEMM = [3]int{130, 129, 131}

func matmulCases() []opCase {
	fp8Pairs := [][]dtype.DType{{dtype.E4M3FN, dtype.BF16}, {dtype.E4M3FN, dtype.E5M2}}
	mmDtypes := runs(each(2, withFP8...), mixed, fp8Pairs)
	var cases []opCase
	for _, c := range []struct {
		name                    string
		batch                   []int
		m, k, n                 int
		transA, transB, sharedB bool
	}{
		{name: "batched", batch: shape(2, 3), m: 5, k: 7, n: 3},
		{name: "batched/transA", batch: shape(2, 3), m: 5, k: 7, n: 3, transA: true},
		{name: "batched/transB", batch: shape(2, 3), m: 5, k: 7, n: 3, transB: true},
		{name: "batched/transA+transB", batch: shape(2, 3), m: 5, k: 7, n: 3, transA: true, transB: true},
		{name: "sharedB", batch: shape(2, 3), m: 4, k: 6, n: 5, sharedB: true},
		{name: "sharedB/transB", batch: shape(2, 3), m: 4, k: 6, n: 5, transB: true, sharedB: true},
		{name: "k=300", m: 3, k: 300, n: 5}, // more than one k step (kcMax 256)
		{name: "parallel", m: parallelGEMM[0], k: parallelGEMM[1], n: parallelGEMM[2], transB: true},
	} {
		a, b := slices.Concat(c.batch, shape(c.m, c.k)), slices.Concat(c.batch, shape(c.k, c.n))
		if c.transA {
			a[len(a)-2], a[len(a)-1] = c.k, c.m
		}
		if c.transB {
			b[len(b)-2], b[len(b)-1] = c.n, c.k
		}
		if c.sharedB {
			b = b[len(b)-2:]
		}
		cases = append(cases, opCase{name: "MatMul/" + c.name, dtypes: mmDtypes, inputs: normals(a, b),
			kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				return outputs(tensor.MatMul(in[0], in[1], c.transA, c.transB))
			},
			ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
				batch := Numel(c.batch)
				val, abs := refMatMul(in[0].Float64s(), in[1].Float64s(), 1, 1, batch, c.m, c.n, c.k, c.transA, c.transB, c.sharedB)
				out := promoted(d...)
				return []expect{bounded(out, computeOf(out), slices.Concat(c.batch, shape(c.m, c.n)), val, abs, c.k)}
			}})
	}
	return append(append(cases, linearCases()...), scaledMatMulCases()...)
}

// refMatMul returns (sa·op(a))·(sb·op(b)) for batch matrices (b shared
// when sharedB), op(a) m×k and op(b) k×n, and the sums of |terms|.
func refMatMul(a, b []float64, sa, sb float64, batch, m, n, k int, transA, transB, sharedB bool) (val, abs []float64) {
	val, abs = make([]float64, batch*m*n), make([]float64, batch*m*n)
	for z := range batch {
		za, zb := z*m*k, z*k*n
		if sharedB {
			zb = 0
		}
		for i := range m {
			for j := range n {
				var s, sAbs float64
				for p := range k {
					ia, ib := za+i*k+p, zb+p*n+j
					if transA {
						ia = za + p*m + i
					}
					if transB {
						ib = zb + j*k + p
					}
					term := (sa * a[ia]) * (sb * b[ib])
					s += term
					sAbs += math.Abs(term)
				}
				val[(z*m+i)*n+j], abs[(z*m+i)*n+j] = s, sAbs
			}
		}
	}
	return val, abs
}

func linearCases() []opCase {
	var cases []opCase
	for _, c := range []struct {
		name string
		x, w []int
		bias bool
	}{
		{"Linear", shape(2, 3, 5), shape(4, 5), true},
		{"Linear/nobias", shape(3, 5), shape(4, 5), false},
		{"Linear/parallel", shape(256, 96), shape(96, 96), true}, // 256·96·96 > 2^21
	} {
		oc := opCase{name: c.name, dtypes: runs(each(2, withFP8...), mixed), inputs: normals(c.x, c.w),
			kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				var bias *tensor.Tensor
				if c.bias {
					bias = in[2]
				}
				return outputs(tensor.Linear(in[0], in[1], bias))
			},
			ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
				in0, out := c.w[1], c.w[0]
				rows := Numel(c.x) / in0
				val, abs := refMatMul(in[0].Float64s(), in[1].Float64s(), 1, 1, 1, rows, out, in0, false, true, false)
				if c.bias { // added to the accumulator before the one rounding
					for r := range rows {
						for o, v := range in[2].Float64s() {
							val[r*out+o] += v
							abs[r*out+o] += math.Abs(v)
						}
					}
				}
				dt := promoted(d[:2]...)
				return []expect{bounded(dt, computeOf(dt), slices.Concat(c.x[:len(c.x)-1], shape(out)), val, abs, in0+1)}
			}}
		if c.bias {
			// The bias may have its own dtype: it is decoded into the accumulator.
			oc.dtypes = runs(each(3, floats...), [][]dtype.DType{{dtype.BF16, dtype.BF16, dtype.F32}})
			oc.inputs = normals(c.x, c.w, c.w[:1])
		}
		cases = append(cases, oc)
	}
	return cases
}

// scaledMatMulCases run the FP8 GEMM: each decoded element is multiplied
// by its scale in float32 as it is packed (one rounding each), then the
// products accumulate: γ_{k+2} of Σ|terms|. A scale of 0 means 1.
func scaledMatMulCases() []opCase {
	dtypes := [][]dtype.DType{ // a, b, out
		{dtype.E4M3FN, dtype.E4M3FN, dtype.F32}, {dtype.E4M3FN, dtype.E5M2, dtype.BF16},
		{dtype.E5M2, dtype.E4M3FN, dtype.F64}, {dtype.BF16, dtype.F32, dtype.F16}, {dtype.E4M3FN, dtype.E4M3FN, dtype.E4M3FN},
	}
	var cases []opCase
	for _, c := range []struct {
		name           string
		m, k, n        int
		transA, transB bool
		scaleA, scaleB float32
	}{
		{"NT", 6, 40, 5, false, true, 1.0 / 3, 0.37},
		{"TN", 6, 40, 5, true, false, 1.0 / 3, 0.37},
		{"unscaled", 4, 9, 7, false, true, 0, 0},
		{"parallel", parallelGEMM[0], parallelGEMM[1], parallelGEMM[2], false, true, 0.5, 1.0 / 3},
	} {
		a, b := shape(c.m, c.k), shape(c.k, c.n)
		if c.transA {
			a = shape(c.k, c.m)
		}
		if c.transB {
			b = shape(c.n, c.k)
		}
		cases = append(cases, opCase{name: "ScaledMatMul/" + c.name, dtypes: dtypes, inputs: normals(a, b),
			kernel: func(d []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				return outputs(tensor.ScaledMatMul(in[0], in[1], c.transA, c.transB, c.scaleA, c.scaleB, d[2]))
			},
			ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
				unit := func(s float32) float64 {
					if s == 0 {
						return 1
					}
					return float64(s)
				}
				val, abs := refMatMul(in[0].Float64s(), in[1].Float64s(), unit(c.scaleA), unit(c.scaleB), 1, c.m, c.n, c.k, c.transA, c.transB, false)
				return []expect{bounded(d[2], dtype.F32, shape(c.m, c.n), val, abs, c.k+2)}
			}})
	}
	return cases
}

// TestMatMulTo checks that MatMulTo is MatMul followed by To, bit for bit
// (NaNs aside), for products in every float dtype headed to float32 (where
// the epilogue rounds in place), to float64 and to a narrower format (where
// To runs after), on one GEMM small enough to run unpacked and one split
// between goroutines.
func TestMatMulTo(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pairs := [][2]dtype.DType{{dtype.F64, dtype.F64}, {dtype.F32, dtype.F32}, {dtype.BF16, dtype.BF16},
		{dtype.F16, dtype.F16}, {dtype.E4M3FN, dtype.BF16}, {dtype.E4M3FN, dtype.E5M2}}
	for _, mnk := range [][3]int{{5, 3, 7}, parallelGEMM} {
		for _, p := range pairs {
			a, b := randn(rng, p[0], 0, 1, mnk[2], mnk[0]), randn(rng, p[1], 0, 1, mnk[2], mnk[1])
			for _, dt := range []dtype.DType{dtype.F32, dtype.F64, dtype.F16} {
				want := tensor.MatMul(a, b, true, false).To(dt)
				got := tensor.MatMulTo(a, b, true, false, dt)
				if got.DType() != dt || !slices.Equal(got.Shape(), want.Shape()) {
					t.Fatalf("%v·%v to %v: got %v, want %v", p[0], p[1], dt, got, want)
				}
				w, g := want.Float64s(), got.Float64s()
				for i := range w {
					if math.Float64bits(w[i]) != math.Float64bits(g[i]) && !(w[i] != w[i] && g[i] != g[i]) {
						t.Fatalf("%v·%v to %v, %v: element %d = %v, want %v", p[0], p[1], dt, mnk, i, g[i], w[i])
					}
				}
			}
		}
	}
}

// TestInt8MatMulT checks Int8MatMulT against integer dot products, exact
// to the bit: random codes over k within one float32 chunk, exactly one,
// and several with a ragged last; every code -128, whose chunk sums reach
// 2²⁴; and large positive codes, whose sums float32 would round past 2²⁴.
func TestInt8MatMulT(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	codes := func(rows, k int, fill func() int8) (*tensor.Tensor, []int8) {
		c := tensor.New(dtype.I8, rows, k)
		vals := make([]int8, rows*k)
		for i := range vals {
			vals[i] = fill()
			c.Data()[i] = byte(vals[i])
		}
		return c, vals
	}
	random := func() int8 { return int8(rng.IntN(256) - 128) }
	for _, c := range []struct {
		m, n, k int
		fill    func() int8
	}{{5, 7, 300, random}, {33, 40, 1024, random}, {20, 70, 2500, random}, {3, 4, 2048, func() int8 { return -128 }}, {2, 3, 3000, func() int8 { return int8(100 + rng.IntN(28)) }}} {
		a, av := codes(c.m, c.k, c.fill)
		b, bv := codes(c.n, c.k, c.fill)
		got := tensor.Int8MatMulT(a, b).Float64s()
		for i := range c.m {
			for j := range c.n {
				var s int64
				for p := range c.k {
					s += int64(av[i*c.k+p]) * int64(bv[j*c.k+p])
				}
				if got[i*c.n+j] != float64(s) {
					t.Fatalf("%dx%dx%d: element (%d, %d) = %v, want %d", c.m, c.n, c.k, i, j, got[i*c.n+j], s)
				}
			}
		}
	}
}
