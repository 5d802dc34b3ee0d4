package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// TestOps runs every op of package tensor, forward and backward, on every
// storage dtype it accepts, against an independent float64 reference with
// the engine's rounding points (reference_test.go), as gonum's testblas
// runs one suite over every implementation. The references are textbook
// loops over the decoded inputs; they share nothing with the kernels.

// opCase is one row of the suite: an op, run once per entry of dtypes.
type opCase struct {
	name string
	// dtypes lists one run per entry: the dtypes of the op's tensor
	// inputs, in order, and then, for ops told their output dtype, that one.
	dtypes [][]dtype.DType
	inputs func(rng *rand.Rand, d []dtype.DType) []*tensor.Tensor
	kernel func(d []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor
	ref    func(d []dtype.DType, in []*tensor.Tensor) []expect
}

var (
	floats  = []dtype.DType{dtype.F64, dtype.F32, dtype.BF16, dtype.F16}
	withFP8 = append(floats[:len(floats):len(floats)], dtype.E4M3FN, dtype.E5M2)
	// mixed are pairs of input dtypes that promote (tensor.Promote):
	// bf16 and f16 to f32, anything with f64 to f64.
	mixed = [][]dtype.DType{{dtype.BF16, dtype.F32}, {dtype.F16, dtype.BF16}, {dtype.F64, dtype.BF16}, {dtype.F32, dtype.F64}}
)

// each returns one run per dtype, with n inputs of that dtype.
func each(n int, dts ...dtype.DType) [][]dtype.DType {
	runs := make([][]dtype.DType, len(dts))
	for i, dt := range dts {
		for range n {
			runs[i] = append(runs[i], dt)
		}
	}
	return runs
}

// runs concatenates lists of runs.
func runs(lists ...[][]dtype.DType) [][]dtype.DType {
	var all [][]dtype.DType
	for _, l := range lists {
		all = append(all, l...)
	}
	return all
}

func opCases() []opCase {
	var cases []opCase
	for _, family := range [][]opCase{elementwiseCases(), castCases(), matmulCases(), convCases(),
		rowCases(), layerNormCases(), shapeCases(), updateOpCases(), transformerCases()} {
		cases = append(cases, family...)
	}
	return cases
}

func TestOps(t *testing.T) {
	for ci, c := range opCases() {
		for di, d := range c.dtypes {
			t.Run(c.name+"/"+dtypesName(d), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(ci), uint64(di)))
				in := c.inputs(rng, d)
				before := make([]string, len(in))
				for i, x := range in {
					before[i] = string(x.Data())
				}
				want := c.ref(d, in)
				// The free lists are stacks, so the second call gets the
				// scratch the first released: a kernel reading scratch it
				// did not write sees the first call's values.
				for call := range 2 {
					got := c.kernel(d, in)
					if len(got) != len(want) {
						t.Fatalf("%d outputs, want %d", len(got), len(want))
					}
					for i := range want {
						check(t, fmt.Sprintf("call %d output %d", call, i), got[i], want[i])
					}
					releaseOutputs(got, in)
				}
				for i, x := range in {
					if string(x.Data()) != before[i] {
						t.Errorf("input %d was modified", i)
					}
				}
			})
		}
	}
}

// releaseOutputs returns the outputs' storage to the pool, for the next
// call to reuse, unless an output is (a view of) an input.
func releaseOutputs(out, in []*tensor.Tensor) {
	for _, o := range out {
		shared := false
		for _, x := range in {
			shared = shared || tensor.SameStorage(o, x)
		}
		if !shared {
			tensor.Release(o)
		}
	}
}

func dtypesName(d []dtype.DType) string {
	names := make([]string, len(d))
	for i, dt := range d {
		names[i] = dt.String()
	}
	return strings.Join(names, "+")
}

// randn returns a tensor of dtype dt holding normal values of mean mu and
// standard deviation sigma, rounded to dt (through float32, as To does).
func randn(rng *rand.Rand, dt dtype.DType, mu, sigma float64, shape ...int) *tensor.Tensor {
	vals := make([]float64, Numel(shape))
	for i := range vals {
		vals[i] = mu + sigma*rng.NormFloat64()
	}
	return tensor.FromFloat64(vals, shape...).To(dt)
}

// normals returns inputs of the given shapes, standard normal, in the
// run's dtypes.
func normals(shapes ...[]int) func(*rand.Rand, []dtype.DType) []*tensor.Tensor {
	return func(rng *rand.Rand, d []dtype.DType) []*tensor.Tensor {
		in := make([]*tensor.Tensor, len(shapes))
		for i, s := range shapes {
			in[i] = randn(rng, d[i], 0, 1, s...)
		}
		return in
	}
}

// outputs is a kernel's results as a list.
func outputs(ts ...*tensor.Tensor) []*tensor.Tensor { return ts }

// computeScalar is s as a kernel of output dtype dt uses it: converted to
// the compute type, as PyTorch converts Python scalars.
func computeScalar(dt dtype.DType, s float64) float64 {
	if dt == dtype.F64 {
		return s
	}
	return float64(float32(s))
}

// shape returns its arguments, for tables of shapes.
func shape(dims ...int) []int { return dims }

// TestRoundTo checks the references' rounding against package dtype's
// casts (which formats_test.go checks bit for bit against PyTorch), so that
// a disagreement points at the kernel rather than at the reference.
func TestRoundTo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for dt, f := range formats {
		for range 20000 {
			x := float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(40)-20))
			if rng.IntN(8) == 0 {
				x *= 1e-30 // subnormals of the 16-bit formats and below
			}
			for _, sat := range []bool{false, true} {
				want := dt.Round(x)
				if sat {
					want = dt.RoundSat(x)
				}
				if got := float32(roundTo(float64(x), f, sat)); !same(got, want) {
					t.Fatalf("%v: roundTo(%g, sat=%v) = %g, dtype rounds to %g", dt, x, sat, got, want)
				}
			}
		}
	}
}
