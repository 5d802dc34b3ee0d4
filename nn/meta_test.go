package nn_test

import (
	"math/rand/v2"
	"testing"

	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// TestMetaBuildsShapesAlone: every layer built on nn.Meta has the
// parameters, shapes and bytes of one built with weights, and no storage.
func TestMetaBuildsShapesAlone(t *testing.T) {
	build := func(rng *rand.Rand) nn.Module {
		return nn.List[nn.Module]{
			nn.NewLinear(rng, 4, 3, true), nn.NewEmbedding(rng, 5, 4), nn.NewLayerNorm(rng, 4),
			nn.NewConv2d(rng, 1, 2, 3, 1, 1), nn.NewCausalSelfAttention(rng, 4, 2),
		}
	}
	real, meta := nn.Parameters(build(rand.New(rand.NewPCG(1, 1)))), nn.Parameters(build(nn.Meta))
	if len(real) != len(meta) {
		t.Fatalf("%d meta parameters, %d real", len(meta), len(real))
	}
	for i, p := range meta {
		r := real[i]
		if p.Path != r.Path || !p.Var.Value.SameShape(r.Var.Value) || p.Var.Value.Bytes() != r.Var.Value.Bytes() || p.Var.Value.DType() != r.Var.Value.DType() {
			t.Errorf("meta %s %v (%d bytes), real %s %v (%d bytes)", p.Path, p.Var.Value, p.Var.Value.Bytes(), r.Path, r.Var.Value, r.Var.Value.Bytes())
		}
		if !p.Var.Value.IsMeta() || r.Var.Value.IsMeta() {
			t.Errorf("%s: meta %v built on nn.Meta, %v built with weights", p.Path, p.Var.Value.IsMeta(), r.Var.Value.IsMeta())
		}
	}
}

// TestParamsCountInPool: a layer's weights live in pool storage, so that
// tensor.Memory counts them: 64×48 + 64 float32s, classes 1536 and 32
// words.
func TestParamsCountInPool(t *testing.T) {
	before := tensor.Memory().Live
	nn.NewLinear(rand.New(rand.NewPCG(1, 2)), 48, 64, true)
	if got, want := tensor.Memory().Live-before, int64(1536*8+32*8); got != want {
		t.Errorf("a Linear's parameters made %d bytes live, want %d", got, want)
	}
}
