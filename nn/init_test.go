package nn_test

import (
	"math"
	"slices"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

func layers(init *nn.Init) nn.Module {
	return nn.List[nn.Module]{
		nn.NewLinear(init, 4, 3, true), nn.NewEmbedding(init, 5, 4), nn.NewLayerNorm(init, 4),
		nn.NewConv2d(init, 1, 2, 3, 1, 1), nn.NewCausalSelfAttention(init, 4, 2),
	}
}

// TestMetaBuildsShapesAlone: every layer built on nn.Meta has the
// parameters, shapes, bytes and initialisers of one built with weights,
// and no storage.
func TestMetaBuildsShapesAlone(t *testing.T) {
	real, meta := nn.Parameters(layers(nn.NewInit(1))), nn.Parameters(layers(nn.Meta(1)))
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
		if p.Var.Init == nil || p.Var.Init != r.Var.Init {
			t.Errorf("%s: meta records initialiser %+v, real %+v", p.Path, p.Var.Init, r.Var.Init)
		}
	}
}

// TestLayersRecordPyTorchDefaults: each layer records the distribution
// PyTorch initialises it from.
func TestLayersRecordPyTorchDefaults(t *testing.T) {
	init := nn.Meta(0)
	lin, emb, ln, conv := nn.NewLinear(init, 16, 3, true), nn.NewEmbedding(init, 5, 4), nn.NewLayerNorm(init, 4), nn.NewConv2d(init, 2, 3, 3, 1, 1)
	bound := 1 / math.Sqrt(2*3*3)
	for _, c := range []struct {
		name   string
		v      *autograd.Var
		dist   nn.Dist
		a, b   float64
		stream uint64
	}{
		{"linear.weight", lin.Weight, nn.Uniform, -0.25, 0.25, 0},
		{"linear.bias", lin.Bias, nn.Uniform, -0.25, 0.25, 1},
		{"embedding.weight", emb.Weight, nn.Normal, 0, 1, 2},
		{"layernorm.weight", ln.Weight, nn.Const, 1, 0, 3},
		{"layernorm.bias", ln.Bias, nn.Const, 0, 0, 4},
		{"conv.weight", conv.Weight, nn.Uniform, -bound, bound, 5},
		{"conv.bias", conv.Bias, nn.Uniform, -bound, bound, 6},
	} {
		want := nn.ParamInit{Dist: c.dist, A: c.a, B: c.b, Stream: c.stream}
		if got := c.v.Init; got != want {
			t.Errorf("%s records %+v, want %+v", c.name, got, want)
		}
	}
}

// TestDistributions draws 2^16 elements of each distribution and checks
// the sample mean and variance, and for the normal the share within one
// standard deviation, each within 6 standard errors of its expected value
// (a chance failure is below 1e-8).
func TestDistributions(t *testing.T) {
	const n = 1 << 16
	for _, c := range []struct {
		p          nn.ParamInit
		mean, vari float64
		// varVar is the variance of one squared deviation: μ4 - σ⁴.
		varVar float64
	}{
		{nn.ParamInit{Dist: nn.Uniform, A: -0.5, B: 0.5, Seed: 3}, 0, 1.0 / 12, 1.0/80 - 1.0/144},
		{nn.ParamInit{Dist: nn.Uniform, A: 1, B: 3, Seed: 4, Stream: 9}, 2, 1.0 / 3, 1.0/5 - 1.0/9},
		{nn.ParamInit{Dist: nn.Normal, A: 0, B: 1, Seed: 5}, 0, 1, 2},
		{nn.ParamInit{Dist: nn.Normal, A: 3, B: 2, Seed: 6, Stream: 1}, 3, 4, 2 * 16},
	} {
		vals := make([]float32, n)
		c.p.Fill(vals, 1<<40) // far along the counter, where a rank's chunk may start
		var sum, sq float64
		for _, v := range vals {
			sum += float64(v)
		}
		mean := sum / n
		within := 0
		for _, v := range vals {
			x := float64(v)
			if c.p.Dist == nn.Uniform && (x < c.p.A || x > c.p.B) {
				t.Fatalf("%+v: %v is out of range", c.p, v)
			}
			if c.p.Dist == nn.Normal && math.Abs(x-c.p.A) <= c.p.B {
				within++
			}
			sq += (x - mean) * (x - mean)
		}
		vari := sq / (n - 1)
		if se := math.Sqrt(c.vari / n); math.Abs(mean-c.mean) > 6*se {
			t.Errorf("%+v: mean %.5f, want %v ± %.5f", c.p, mean, c.mean, 6*se)
		}
		if se := math.Sqrt(c.varVar / n); math.Abs(vari-c.vari) > 6*se {
			t.Errorf("%+v: variance %.5f, want %v ± %.5f", c.p, vari, c.vari, 6*se)
		}
		if c.p.Dist == nn.Normal {
			const p1 = 0.6826894921370859 // P(|Z| ≤ 1)
			if share, se := float64(within)/n, math.Sqrt(p1*(1-p1)/n); math.Abs(share-p1) > 6*se {
				t.Errorf("%+v: %.4f of the elements within one std, want %.4f ± %.4f", c.p, share, p1, 6*se)
			}
		}
	}
}

// TestStreamsDiffer: parameters of one build and builds of two seeds draw
// different values; one seed draws the same ones every time.
func TestStreamsDiffer(t *testing.T) {
	values := func(seed uint64) [][]float32 {
		init := nn.NewInit(seed)
		a, b := nn.NewLinear(init, 8, 8, false), nn.NewLinear(init, 8, 8, false)
		return [][]float32{a.Weight.Value.Float32s(), b.Weight.Value.Float32s()}
	}
	one, again, other := values(1), values(1), values(2)
	if slices.Equal(one[0], one[1]) {
		t.Error("two parameters of one build hold the same values")
	}
	if slices.Equal(one[0], other[0]) || slices.Equal(one[1], other[1]) {
		t.Error("seeds 1 and 2 give a parameter the same values")
	}
	if !slices.Equal(one[0], again[0]) || !slices.Equal(one[1], again[1]) {
		t.Error("two builds from seed 1 differ")
	}
}

// TestInitRangeRefuses: a parameter without an initialiser, and a range
// outside the parameter, are errors.
func TestInitRangeRefuses(t *testing.T) {
	w := nn.NewLinear(nn.Meta(0), 4, 3, false).Weight // 12 elements
	for _, c := range []struct {
		v        *autograd.Var
		start, n int
	}{
		{autograd.Param(tensor.FromFloat32([]float32{1, 2}, 2)), 0, 2},
		{w, 10, 3}, {w, -1, 2}, {w, 2, -1},
	} {
		if got, err := nn.InitRange(c.v, c.start, c.n); err == nil {
			t.Errorf("InitRange(%v, %d, %d) = %v, want an error", c.v.Value, c.start, c.n, got)
		}
	}
	if got, err := nn.InitRange(w, 9, 3); err != nil || got.Len() != 3 {
		t.Errorf("InitRange of the last 3 elements: %v, %v", got, err)
	}
}

// TestParamsCountInPool: a layer's weights live in pool storage, so that
// tensor.Memory counts them: 64×48 + 64 float32s, classes 1536 and 32
// words.
func TestParamsCountInPool(t *testing.T) {
	before := tensor.Memory().Live
	nn.NewLinear(nn.NewInit(1), 48, 64, true)
	if got, want := tensor.Memory().Live-before, int64(1536*8+32*8); got != want {
		t.Errorf("a Linear's parameters made %d bytes live, want %d", got, want)
	}
}
