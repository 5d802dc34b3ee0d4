package quant_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/internal/torchoracle"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/quant"
	"github.com/weftml/weft/tensor"
)

// TestToFloat: an MLP whose fc1 and fc2 are nf4-dq with LoRA adapters
// (B drawn non-zero, as after training) and whose head is plain with an
// adapter computes, once ToFloat merges the adapters into float32 weights,
// what it computed before within float32 rounding; without merging, what
// the same model computes with the adapters' B at zero. Adapters lists the
// adapters' values, and the merged model has no GEMM of quant's left.
func TestToFloat(t *testing.T) {
	build := func() (*models.MLP, []quant.Adapter) {
		m := models.NewMLP(nn.NewInit(1))
		q, err := precision.Parse("nf4-dq", precision.Options{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := precision.Compose(q, quant.NewLoRA(4, 8, "fc1", "fc2", "head"))
		if err != nil {
			t.Fatal(err)
		}
		convert(t, p, m)
		rng := rand.New(rand.NewPCG(3, 4))
		for _, np := range nn.Parameters(m) {
			if v := np.Var.Value; strings.HasSuffix(np.Path, ".lora_B.weight") {
				v.CopyFrom(tensor.Generate(func(dst []float32) {
					for i := range dst {
						dst[i] = float32(rng.NormFloat64())
					}
				}, v.Shape()...))
			}
		}
		return m, quant.Adapters(m)
	}
	x := tensor.Generate(func(dst []float32) {
		for i := range dst {
			dst[i] = float32(math.Sin(float64(i)))
		}
	}, 5, 32)
	forward := func(m *models.MLP) []float64 {
		out, err := m.Forward(&autograd.Tape{NoGrad: true}, data.Batch{X: x})
		if err != nil {
			t.Fatal(err)
		}
		return out.Value.Float64s()
	}

	adapted, adapters := build()
	if len(adapters) != 3 || adapters[0].Module != "fc1" || adapters[2].Module != "head" || adapters[1].B.Dim(0) != 64 || adapters[1].A.Dim(0) != 4 {
		t.Fatalf("adapters %+v: want fc1, fc2 and head, A [4, in], B [out, 4]", adapters)
	}
	want := forward(adapted)
	quant.ToFloat(adapted, true)
	for path, l := range map[string]*nn.Linear{"fc1": adapted.FC1, "fc2": adapted.FC2, "head": adapted.Head} {
		if l.GEMM != nil || l.Weight == nil {
			t.Errorf("merged %s: GEMM %T, weight %v; want a plain float Linear", path, l.GEMM, l.Weight)
		}
	}
	if e := torchoracle.Normwise(forward(adapted), want); e > 1e-6 {
		t.Errorf("merged model vs adapted: %.3g normwise, want at most 1e-6", e)
	}

	base, _ := build()
	quant.ToFloat(base, false)
	zeroed, _ := build()
	for _, np := range nn.Parameters(zeroed) {
		if strings.HasSuffix(np.Path, ".lora_B.weight") {
			np.Var.Value.Fill(0)
		}
	}
	if e := torchoracle.Normwise(forward(base), forward(zeroed)); e > 1e-6 {
		t.Errorf("unmerged base vs the adapted model with B = 0: %.3g normwise, want at most 1e-6", e)
	}
	if e := torchoracle.Normwise(forward(base), want); e < 1e-3 {
		t.Errorf("the base without adapters is within %.3g of the adapted model: the adapters changed nothing", e)
	}
}
