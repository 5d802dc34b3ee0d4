package fp8

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// TestCodecsCastAsTheWhole: each recipe's codec, splitting a weight into 3
// chunks that cut its blocks, agreeing on the amaxes as FSDP's all-reduce
// does and decoding the gathered codes, gives every GEMM the operand the
// recipe's own cast of the whole weight gives it, bit for bit, NaN, inf
// and zero blocks included.
func TestCodecsCastAsTheWhole(t *testing.T) {
	const rows, cols, ranks = 48, 160, 3
	rng := rand.New(rand.NewPCG(1, 2))
	vals := make([]float32, rows*cols)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(20)-10)))
	}
	for i := range cols { // a zero row, and a row of inf and NaN
		vals[5*cols+i] = 0
	}
	vals[9*cols+3], vals[9*cols+77] = float32(math.Inf(-1)), float32(math.NaN())
	for _, c := range []struct {
		name string
		q    quantizer
		dt   dtype.DType
	}{
		{"fp8-current", currentScaling{&Current{}}, dtype.E4M3FN},
		{"fp8-rowwise", axiswise{}, dtype.E4M3FN},
		{"fp8-rowwise-gw-hp", axiswise{highPrecisionWeightGrad: true}, dtype.E4M3FN},
		{"fp8-mx", blockScaling{scale: mxScale}, dtype.E4M3FN},
		{"mxfp4", blockScaling{scale: mxfp4Scale}, dtype.E2M1},
		{"nvfp4", nvfp4Scaling{}, dtype.E2M1},
		{"fp8-block", blockwise{pow2: true}, dtype.E4M3FN},
	} {
		for _, gemms := range [][2]bool{{true, false}, {false, true}, {true, true}} {
			w := tensor.FromFloat32(vals, rows, cols)
			l := &linear{format: Format{c.dt, c.dt}, q: c.q}
			l.weight = &autograd.Var{Value: w}
			var coded codedLinears
			coded.linears = map[string]*linear{"fc": l}
			k := coded.GatherCodec("fc.weight", gemms[0], gemms[1]).(*codec)
			chunk := (rows*cols + ranks - 1) / ranks
			padded := append(append([]float32(nil), vals...), make([]float32, chunk*ranks-len(vals))...)
			var agreed []float32
			for r := range ranks {
				a := k.Amaxes(tensor.FromFloat32(padded[r*chunk:(r+1)*chunk], chunk), r*chunk)
				if agreed == nil {
					agreed = a
				}
				for i := range a {
					agreed[i] = max(agreed[i], a[i])
				}
			}
			wholes := make([][]float32, k.Parts())
			for r := range ranks {
				for j, p := range k.Encode(tensor.FromFloat32(padded[r*chunk:(r+1)*chunk], chunk), r*chunk, agreed) {
					wholes[j] = append(wholes[j], p.Float32s()...)
				}
			}
			parts := make([]*tensor.Tensor, len(wholes))
			for j, v := range wholes {
				parts[j] = tensor.FromFloat32(v, len(v)).To(c.dt)
			}
			k.Use(parts, agreed)
			want := c.q.quantize(roleW, w, c.dt, training)
			for axis, needed := range [2]bool{gemms[1], gemms[0]} {
				if !needed {
					continue
				}
				got, exp := l.coded.along(axis), want.along(axis)
				g, e := got.t.Float32s(), exp.t.Float32s()
				bad := 0
				for i := range e {
					if math.Float32bits(g[i]*got.scale) != math.Float32bits(e[i]*exp.scale) && !(g[i] != g[i] && e[i] != e[i]) {
						bad++
					}
				}
				if bad > 0 || got.scale != exp.scale && !(got.scale != got.scale && exp.scale != exp.scale) {
					t.Errorf("%s, gathered for %v, along %d: %d of %d elements differ from the whole weight's cast, scale %g want %g", c.name, gemms, axis, bad, len(e), got.scale, exp.scale)
				}
			}
			l.coded.drop()
		}
	}
}
