package tensor_test

import (
	"fmt"
	"math"
	"slices"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// The data-movement rows of TestOps: exact copies (every dtype, FP8
// included, moves bytes) and the embedding gradient's scatter-add.

var embedIdx = []int{1, 3, 1, 0, 1, 4} // row 1 three times, row 2 never

func shapeCases() []opCase {
	var cases []opCase
	for _, p := range []struct {
		x, perm []int
	}{
		{shape(2, 3, 4), shape(2, 0, 1)},
		{shape(2, 3, 4, 5), shape(0, 2, 1, 3)}, // the last axis stays: copied in runs
		{shape(5), shape(0)},
		{shape(3, 1, 2), shape(2, 1, 0)},
	} {
		cases = append(cases, moveCase(fmt.Sprintf("Permute/%v%v", p.x, p.perm), p.x,
			func(x *tensor.Tensor) *tensor.Tensor { return tensor.Permute(x, p.perm...) },
			func(x []float64) ([]float64, []int) { return refPermute(x, p.x, p.perm) }))
	}
	for _, n := range []struct{ x, start, length int }{{7, 2, 3}, {1, 0, 1}} {
		x := shape(3, 4, n.x)
		cases = append(cases, moveCase(fmt.Sprintf("Narrow/%v[%d:%d]", x, n.start, n.start+n.length), x,
			func(t *tensor.Tensor) *tensor.Tensor { return tensor.Narrow(t, n.start, n.length) },
			func(v []float64) ([]float64, []int) {
				var out []float64
				for r := 0; r < len(v); r += n.x {
					out = append(out, v[r+n.start:r+n.start+n.length]...)
				}
				return out, shape(3, 4, n.length)
			}))
	}
	cases = append(cases,
		moveCase("Unnarrow", shape(3, 4, 3),
			func(t *tensor.Tensor) *tensor.Tensor { return tensor.Unnarrow(t, 2, 7) },
			func(v []float64) ([]float64, []int) {
				out := make([]float64, 3*4*7)
				for r := range 12 {
					copy(out[r*7+2:], v[r*3:r*3+3])
				}
				return out, shape(3, 4, 7)
			}),
		moveCase("SliceRows", shape(6, 5),
			func(t *tensor.Tensor) *tensor.Tensor { return tensor.SliceRows(t, 2, 3) },
			func(v []float64) ([]float64, []int) { return slices.Clone(v[10:25]), shape(3, 5) }),
		moveCase("Clone", shape(4, 5),
			func(t *tensor.Tensor) *tensor.Tensor { return t.Clone() },
			func(v []float64) ([]float64, []int) { return v, shape(4, 5) }),
		moveCase("Flat", shape(4, 5),
			func(t *tensor.Tensor) *tensor.Tensor { return t.Flat(3, 11) },
			func(v []float64) ([]float64, []int) { return v[3:14], shape(11) }),
		moveCase("Reshape", shape(2, 6),
			func(t *tensor.Tensor) *tensor.Tensor { return t.Reshape(3, -1) },
			func(v []float64) ([]float64, []int) { return v, shape(3, 4) }),
		moveCase("Embedding", shape(5, 3),
			func(t *tensor.Tensor) *tensor.Tensor {
				out, err := tensor.Embedding(t, embedIdx, 2, 3)
				if err != nil {
					panic(err)
				}
				return out
			},
			func(v []float64) ([]float64, []int) {
				var out []float64
				for _, id := range embedIdx {
					out = append(out, v[id*3:id*3+3]...)
				}
				return out, shape(2, 3, 3)
			}),
		opCase{name: "EmbeddingBackward", inputs: normals(shape(len(embedIdx), 3)),
			// The run's second dtype is the gradient's.
			dtypes: runs(each(2, floats...), [][]dtype.DType{{dtype.F64, dtype.BF16}, {dtype.F64, dtype.F32}, {dtype.BF16, dtype.F32}, {dtype.BF16, dtype.F64}, {dtype.F32, dtype.F64}}),
			kernel: func(d []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				return outputs(tensor.EmbeddingBackward(in[0], embedIdx, 5, d[1]))
			},
			ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
				val, abs := make([]float64, 5*3), make([]float64, 5*3)
				for i, id := range embedIdx {
					for j, g := range in[0].Float64s()[i*3 : i*3+3] {
						val[id*3+j] += g
						abs[id*3+j] += math.Abs(g)
					}
				}
				// Repeated rows accumulate in the compute type (float64 if
				// either side is F64) and round once: 3 terms at most.
				return []expect{bounded(d[1], computeOf(promoted(d...)), shape(5, 3), val, abs, 3)}
			}},
	)
	return cases
}

// moveCase is an op that moves values without arithmetic, run on every
// dtype: ref maps the input's values to the output's and gives its shape.
func moveCase(name string, x []int, op func(*tensor.Tensor) *tensor.Tensor, ref func([]float64) ([]float64, []int)) opCase {
	return opCase{name: name, dtypes: each(1, withFP8...), inputs: normals(x),
		kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor { return outputs(op(in[0])) },
		ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
			val, s := ref(in[0].Float64s())
			return []expect{exact(d[0], s, val)}
		}}
}

// refPermute moves element x[i] to the output position whose index along
// axis k is i's index along axis perm[k].
func refPermute(x []float64, dims, perm []int) ([]float64, []int) {
	outDims := make([]int, len(perm))
	for k, p := range perm {
		outDims[k] = dims[p]
	}
	out := make([]float64, len(x))
	idx := make([]int, len(dims))
	for i, v := range x {
		for a, rest := len(dims)-1, i; a >= 0; a-- {
			idx[a], rest = rest%dims[a], rest/dims[a]
		}
		o := 0
		for k, p := range perm {
			o = o*outDims[k] + idx[p]
		}
		out[o] = v
	}
	return out, outDims
}
