package nn_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// tree is a small model: a List holding a Linear without bias, an attention
// block (whose projections are its children) and a LayerNorm.
type tree struct {
	Layers nn.List[nn.Module]
}

func (m *tree) Params() []nn.Param { return nil }
func (m *tree) Children() []nn.Child {
	return []nn.Child{{Name: "layers", Module: m.Layers}}
}

func newTree() *tree {
	init := nn.NewInit(1)
	return &tree{Layers: nn.List[nn.Module]{
		nn.NewLinear(init, 4, 3, false),
		nn.NewCausalSelfAttention(init, 4, 2),
		nn.NewLayerNorm(init, 4),
	}}
}

func TestParametersAndWalk(t *testing.T) {
	m := newTree()
	var paths, walked []string
	for _, p := range nn.Parameters(m) {
		paths = append(paths, fmt.Sprintf("%s%v", p.Path, p.Var.Value.Shape()))
	}
	nn.Walk(m, func(path string, m nn.Module) { walked = append(walked, path+":"+nn.Kind(m)) })
	for _, c := range []struct{ got, want []string }{
		{paths, []string{"layers.0.weight[3 4]", "layers.1.qkv.weight[12 4]", "layers.1.qkv.bias[12]",
			"layers.1.proj.weight[4 4]", "layers.1.proj.bias[4]", "layers.2.weight[4]", "layers.2.bias[4]"}},
		{walked, []string{":tree", "layers:List", "layers.0:Linear", "layers.1:CausalSelfAttention",
			"layers.1.qkv:Linear", "layers.1.proj:Linear", "layers.2:LayerNorm"}},
	} {
		if strings.Join(c.got, " ") != strings.Join(c.want, " ") {
			t.Errorf("got  %v\nwant %v", c.got, c.want)
		}
	}
}

func TestLoadAndCast(t *testing.T) {
	m := newTree()
	// Load converts each tensor to the parameter's dtype.
	err := nn.Load(m, func(path string) (*tensor.Tensor, error) {
		for _, p := range nn.Parameters(newTree()) {
			if p.Path == path {
				v := tensor.New(dtype.BF16, p.Var.Value.Shape()...)
				v.Fill(1.5)
				return v, nil
			}
		}
		return nil, fmt.Errorf("no %s", path)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range nn.Parameters(m) {
		if p.Var.Value.DType() != dtype.F32 || p.Var.Value.Float32s()[0] != 1.5 {
			t.Errorf("%s after Load: %v = %v", p.Path, p.Var.Value, p.Var.Value.Float32s()[0])
		}
		p.Var.Grad = p.Var.Value.Clone()
	}
	nn.Walk(m, func(_ string, mod nn.Module) { nn.CastOwn(mod, dtype.BF16) })
	for _, p := range nn.Parameters(m) {
		if p.Var.Value.DType() != dtype.BF16 || p.Var.Grad != nil {
			t.Errorf("%s after CastOwn: %v, gradient %v", p.Path, p.Var.Value, p.Var.Grad)
		}
	}
	wrong := func(string) (*tensor.Tensor, error) { return tensor.New(dtype.F32, 2, 2), nil }
	if err := nn.Load(m, wrong); err == nil || !strings.Contains(err.Error(), "layers.0.weight") {
		t.Errorf("Load with a wrong shape: %v", err)
	}
}
