package main

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/precision/quant"
	"github.com/weftml/weft/tensor"
)

// writeWeights writes a small checkpoint: two matrices to quantize (one
// bf16), a bias and a matrix under --min-dim to copy.
func writeWeights(t *testing.T, path string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	stored := func(name string, dt dtype.DType, shape ...int) checkpoint.Tensor {
		n := 1
		for _, d := range shape {
			n *= d
		}
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = float32(rng.NormFloat64())
		}
		v := tensor.FromFloat32(vals, shape...).To(dt)
		return checkpoint.Tensor{Name: name, DType: dt, Shape: shape, Data: v.Data()}
	}
	err := checkpoint.WriteSafetensors(path, []checkpoint.Tensor{
		stored("blocks.0.fc.weight", dtype.F32, 64, 32),
		stored("blocks.0.fc.bias", dtype.F32, 64),
		stored("head.weight", dtype.BF16, 48, 32),
		stored("small.weight", dtype.F32, 8, 8),
	}, map[string]string{"note": "kept"})
	if err != nil {
		t.Fatal(err)
	}
}

func TestQuantize(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.safetensors"), filepath.Join(dir, "out.safetensors")
	writeWeights(t, in)
	got, code := run("quantize", in, out, "--format", "nf4-dq")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, got)
	}
	// 64×32 float32: 8192 bytes become 1024 of codes, 32 absmax codes, a
	// nested scale and the offset; 48×32 bf16: 3072 become 768+24+4+4.
	for _, want := range []string{"blocks.0.fc.weight", "8192", "1064", "head.weight", "3072", "800", "total", "wrote"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "small.weight") {
		t.Errorf("an 8×8 matrix was quantized with --min-dim 16:\n%s", got)
	}
	f, err := checkpoint.ReadSafetensors(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"blocks.0.fc.bias", "blocks.0.fc.weight.nf4", "blocks.0.fc.weight.nested_offset", "head.weight.absmax", "small.weight"} {
		if !slices.Contains(f.Names(), name) {
			t.Errorf("%s lacks %s: %v", out, name, f.Names())
		}
	}
	if f.Metadata["note"] != "kept" {
		t.Errorf("the input's metadata was dropped: %v", f.Metadata)
	}
	w, err := quant.DequantizeTensor(f, "head.weight")
	if err != nil || w.DType() != dtype.BF16 || w.Dim(0) != 48 {
		t.Errorf("reading head.weight back: %v, %v", w, err)
	}
	if got, code := run("inspect", out); code != 0 || !strings.Contains(got, "blocks.0.fc.weight.nf4") {
		t.Errorf("inspect: exit %d:\n%s", code, got)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"quantize", in, out, "--format", "nf3"}, "accepted are nf4"},
		{[]string{"quantize", in, out, "--match", "[w"}, "--match"},
		{[]string{"quantize", filepath.Join(dir, "missing"), out}, "missing"},
		{[]string{"quantize", in}, "accepts 2 arg"},
	} {
		if got, code := run(c.args...); code != 1 || !strings.Contains(got, c.want) {
			t.Errorf("%v: exit %d, want 1 and a message with %q:\n%s", c.args, code, c.want, got)
		}
	}
}
