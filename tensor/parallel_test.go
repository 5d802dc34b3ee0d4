package tensor_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// parallelOp is an op over inputs big enough to split across cores.
type parallelOp struct {
	name string
	run  func(dt dtype.DType) []*tensor.Tensor
}

// parallelOps returns the ops that split their work across cores, each over
// fresh inputs (of dtype dt where the op takes one) from a fixed seed.
func parallelOps() []parallelOp {
	const rows, c = 700, 384 // 268800 elements: four ranges on four cores
	in := func(dt dtype.DType, seed uint64, shape ...int) *tensor.Tensor {
		return randT(rand.New(rand.NewPCG(seed, 17)), dt, shape...)
	}
	targets := make([]int, rows)
	for i := range targets {
		targets[i] = (i * 131) % c
	}
	return []parallelOp{
		{"Softmax", func(dt dtype.DType) []*tensor.Tensor { return outs(tensor.Softmax(in(dt, 1, rows, c))) }},
		{"SoftmaxBackward", func(dt dtype.DType) []*tensor.Tensor {
			return outs(tensor.SoftmaxBackward(tensor.Softmax(in(dt, 1, rows, c)), in(dt, 2, rows, c)))
		}},
		{"LayerNorm", func(dt dtype.DType) []*tensor.Tensor {
			y, m, r := tensor.LayerNorm(in(dt, 1, rows, c), in(dt, 2, c), in(dt, 3, c), 1e-5)
			return outs(y, m, r)
		}},
		{"LayerNormBackward", func(dt dtype.DType) []*tensor.Tensor {
			x, w := in(dt, 1, rows, c), in(dt, 2, c)
			_, m, r := tensor.LayerNorm(x, w, in(dt, 3, c), 1e-5)
			dx, dw, db := tensor.LayerNormBackward(x, w, m, r, in(dt, 4, rows, c))
			return outs(dx, dw, db)
		}},
		{"GELU", func(dt dtype.DType) []*tensor.Tensor { return outs(tensor.GELU(in(dt, 1, rows, c))) }},
		{"GELUBackward", func(dt dtype.DType) []*tensor.Tensor {
			return outs(tensor.GELUBackward(in(dt, 1, rows, c), in(dt, 2, rows, c)))
		}},
		{"ReLU", func(dt dtype.DType) []*tensor.Tensor { return outs(tensor.ReLU(in(dt, 1, rows, c))) }},
		{"ReLUBackward", func(dt dtype.DType) []*tensor.Tensor {
			return outs(tensor.ReLUBackward(tensor.ReLU(in(dt, 1, rows, c)), in(dt, 2, rows, c)))
		}},
		{"Mul", func(dt dtype.DType) []*tensor.Tensor { return outs(tensor.Mul(in(dt, 1, rows, c), in(dt, 2, rows, c))) }},
		{"Scale", func(dt dtype.DType) []*tensor.Tensor { return outs(tensor.Scale(in(dt, 1, rows, c), 0.3)) }},
		{"AddBroadcast/features", func(dt dtype.DType) []*tensor.Tensor {
			return outs(tensor.AddBroadcast(in(dt, 1, rows, c), in(dt, 2, c), 1))
		}},
		{"AddBroadcast/channels", func(dt dtype.DType) []*tensor.Tensor {
			return outs(tensor.AddBroadcast(in(dt, 1, 14, 96, 200), in(dt, 2, 96), 1))
		}},
		{"ReduceBroadcast/features", func(dt dtype.DType) []*tensor.Tensor {
			return outs(tensor.ReduceBroadcast(in(dt, 1, rows, c), []int{c}, 1, dt))
		}},
		{"ReduceBroadcast/channels", func(dt dtype.DType) []*tensor.Tensor {
			return outs(tensor.ReduceBroadcast(in(dt, 1, 14, 96, 200), []int{96}, 1, dt))
		}},
		{"Permute/heads", func(dt dtype.DType) []*tensor.Tensor {
			return outs(tensor.Permute(in(dt, 1, 7, 100, 6, 64), 0, 2, 1, 3))
		}},
		{"Permute/transpose", func(dt dtype.DType) []*tensor.Tensor {
			return outs(tensor.Permute(in(dt, 1, 6, 200, 256), 0, 2, 1))
		}},
		{"To/BF16", func(dt dtype.DType) []*tensor.Tensor { return outs(in(dt, 1, rows, c).To(dtype.BF16)) }},
		{"To/F32", func(dt dtype.DType) []*tensor.Tensor { return outs(in(dt, 1, rows, c).To(dtype.F32)) }},
		{"To/F16", func(dt dtype.DType) []*tensor.Tensor { return outs(in(dt, 1, rows, c).To(dtype.F16)) }},
		{"CrossEntropy", func(dt dtype.DType) []*tensor.Tensor {
			l, err := tensor.CrossEntropy(in(dt, 1, rows, c), targets)
			if err != nil {
				panic(err)
			}
			return outs(l)
		}},
		{"CrossEntropyBackward", func(dt dtype.DType) []*tensor.Tensor {
			return outs(tensor.CrossEntropyBackward(in(dt, 1, rows, c), targets, tensor.Scalar(dt, 0.7)))
		}},
		{"AdamW", func(dt dtype.DType) []*tensor.Tensor {
			p, g, m, v := in(dt, 1, rows, c), in(dt, 2, rows, c), in(dt, 3, rows, c), in(dt, 4, rows, c)
			v = tensor.Mul(v, v)
			tensor.AdamWStep(p, g, m, v, tensor.AdamWScalars{Decay: 0.99, Lerp: 0.1, Beta2: 0.999,
				OneMinusB2: 0.001, BC2Sqrt: 0.3, Eps: 1e-8, NegStepSize: -1e-3})
			return outs(p, m, v)
		}},
		{"SGD", func(dt dtype.DType) []*tensor.Tensor {
			p := in(dt, 1, rows, c)
			tensor.SGDStep(p, in(dt, 2, rows, c), 0.1)
			return outs(p)
		}},
		{"Linear", func(dt dtype.DType) []*tensor.Tensor {
			return outs(tensor.Linear(in(dt, 1, rows, c), in(dt, 2, c, c), in(dt, 3, c)))
		}},
		{"AddInPlace", func(dt dtype.DType) []*tensor.Tensor {
			t := in(dt, 1, rows, c)
			t.AddInPlace(in(dt, 2, rows, c))
			return outs(t)
		}},
		{"ScaleInPlace", func(dt dtype.DType) []*tensor.Tensor {
			t := in(dt, 1, rows, c)
			t.ScaleInPlace(0.3)
			return outs(t)
		}},
	}
}

func outs(ts ...*tensor.Tensor) []*tensor.Tensor { return ts }

// TestParallelOpsIgnoreGOMAXPROCS requires each op that splits across cores
// to give the same bits on one core as on two (and four).
func TestParallelOpsIgnoreGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, op := range parallelOps() {
		for _, dt := range []dtype.DType{dtype.F32, dtype.BF16, dtype.F64} {
			t.Run(fmt.Sprintf("%s/%s", op.name, dt), func(t *testing.T) {
				var want []*tensor.Tensor
				for _, procs := range []int{1, 2, 4} {
					runtime.GOMAXPROCS(procs)
					got := op.run(dt)
					if want == nil {
						want = got
						continue
					}
					for i := range got {
						if !bytes.Equal(got[i].Data(), want[i].Data()) {
							t.Errorf("output %d at GOMAXPROCS %d differs from GOMAXPROCS 1", i, procs)
						}
					}
				}
			})
		}
	}
}
