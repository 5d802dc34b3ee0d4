package tensor_test

import (
	"math/rand/v2"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// BenchmarkActivationOps times the ops around the GEMMs at the size of a
// gpt of width 384 over 8×256 tokens (2048 rows; the MLP's 1536 wide, the
// attention scores 8·6 heads of 256×256); run with -cpu 1,2 to see them
// use the cores.
func BenchmarkActivationOps(b *testing.B) {
	rng := rand.New(rand.NewPCG(17, 2))
	const rows, width, wide = 2048, 384, 1536
	x, w, bias := randT(rng, dtype.F32, rows, width), randT(rng, dtype.F32, width), randT(rng, dtype.F32, width)
	dyn := randT(rng, dtype.F32, rows, width)
	h, dh := randT(rng, dtype.F32, rows, wide), randT(rng, dtype.F32, rows, wide)
	hbf := h.To(dtype.BF16)
	scores := randT(rng, dtype.F32, 8*6*256, 256)
	heads := randT(rng, dtype.F32, 8, 256, 6, 64)
	logits := randT(rng, dtype.F32, rows, 512)
	targets := make([]int, rows)
	for i := range targets {
		targets[i] = rng.IntN(512)
	}
	_, mean, rstd := tensor.LayerNorm(x, w, bias, 1e-5)
	one := tensor.Scalar(dtype.F32, 1)
	p, g, m, v := randT(rng, dtype.F32, wide, width), randT(rng, dtype.F32, wide, width), randT(rng, dtype.F32, wide, width), randT(rng, dtype.F32, wide, width)
	v = tensor.Mul(v, v)
	ops := []struct {
		name string
		run  func() []*tensor.Tensor
	}{
		{"Softmax/12288x256", func() []*tensor.Tensor { return []*tensor.Tensor{tensor.Softmax(scores)} }},
		{"LayerNorm/2048x384", func() []*tensor.Tensor {
			y, m, r := tensor.LayerNorm(x, w, bias, 1e-5)
			return []*tensor.Tensor{y, m, r}
		}},
		{"LayerNormBackward/2048x384", func() []*tensor.Tensor {
			dx, dw, db := tensor.LayerNormBackward(x, w, mean, rstd, dyn)
			return []*tensor.Tensor{dx, dw, db}
		}},
		{"GELU/2048x1536", func() []*tensor.Tensor { return []*tensor.Tensor{tensor.GELU(h)} }},
		{"GELUBackward/2048x1536", func() []*tensor.Tensor { return []*tensor.Tensor{tensor.GELUBackward(h, dh)} }},
		{"AddBroadcast/2048x1536", func() []*tensor.Tensor { return []*tensor.Tensor{tensor.AddBroadcast(h, h.Flat(0, wide), 1)} }},
		{"ReduceBroadcast/2048x1536", func() []*tensor.Tensor {
			return []*tensor.Tensor{tensor.ReduceBroadcast(dh, []int{wide}, 1, dtype.F32)}
		}},
		{"Permute/8x256x6x64", func() []*tensor.Tensor { return []*tensor.Tensor{tensor.Permute(heads, 0, 2, 1, 3)} }},
		{"ToBF16/2048x1536", func() []*tensor.Tensor { return []*tensor.Tensor{h.To(dtype.BF16)} }},
		{"ToF32/2048x1536", func() []*tensor.Tensor { return []*tensor.Tensor{hbf.To(dtype.F32)} }},
		{"CrossEntropy/2048x512", func() []*tensor.Tensor { l, _ := tensor.CrossEntropy(logits, targets); return []*tensor.Tensor{l} }},
		{"CrossEntropyBackward/2048x512", func() []*tensor.Tensor {
			return []*tensor.Tensor{tensor.CrossEntropyBackward(logits, targets, one)}
		}},
		{"AdamW/1536x384", func() []*tensor.Tensor {
			tensor.AdamWStep(p, g, m, v, tensor.AdamWScalars{Decay: 1, Lerp: 0.1, Beta2: 0.999, OneMinusB2: 0.001, BC2Sqrt: 0.5, Eps: 1e-8, NegStepSize: -1e-6})
			return nil
		}},
	}
	for _, op := range ops {
		b.Run(op.name, func(b *testing.B) {
			for b.Loop() {
				for _, t := range op.run() {
					tensor.Release(t)
				}
			}
		})
	}
}
