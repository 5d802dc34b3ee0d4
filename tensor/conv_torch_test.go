package tensor_test

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"testing"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// torchConvFile holds bf16 convolutions computed by PyTorch 1.13 on the CPU
// (testdata/ops/make_conv_bf16.py, run by hand; its output is committed).
const torchConvFile = "../testdata/ops/conv_bf16.safetensors"

// TestConv2dBF16MatchesPyTorch compares weft's bf16 Conv2d and both
// gradients with PyTorch's. Both accumulate float32 products and round
// once to bf16, in different orders, so they may differ only where the
// exact value lies within the float32 accumulation bound (γ_n·Σ|terms|) of
// a bf16 rounding boundary: each must lie in the reference interval of
// TestOps (where it holds one value, weft and PyTorch agree bit for bit).
// That PyTorch's values lie in it also checks the reference's semantics
// against PyTorch. (When this was written they agreed on every element.)
func TestConv2dBF16MatchesPyTorch(t *testing.T) {
	f, err := checkpoint.ReadSafetensors(torchConvFile)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s is missing: run testdata/ops/make_conv_bf16.py", torchConvFile)
	}
	if err != nil {
		t.Fatal(err)
	}
	load := func(name string) *tensor.Tensor {
		st, ok := f.Tensor(name)
		if !ok || st.DType != dtype.BF16 {
			t.Fatalf("%s: no bf16 tensor %s", torchConvFile, name)
		}
		x, err := tensor.FromBytes(st.DType, st.Data, st.Shape...)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	cases := 0
	for _, name := range slices.Sorted(maps.Keys(f.Metadata)) {
		if name == "torch" { // the version that wrote the file
			continue
		}
		cases++
		var stride, pad int
		if _, err := fmt.Sscanf(f.Metadata[name], "stride=%d,pad=%d", &stride, &pad); err != nil {
			t.Fatalf("%s: case %s: %v", torchConvFile, name, err)
		}
		x, w, dy := load(name+".x"), load(name+".w"), load(name+".dy")
		s := x.Shape()
		g := tensor.ConvGeom{N: s[0], C: s[1], H: s[2], W: s[3], Cout: w.Dim(0), KH: w.Dim(2), KW: w.Dim(3), Stride: stride, Pad: pad}
		g.OutH, g.OutW = (g.H+2*g.Pad-g.KH)/g.Stride+1, (g.W+2*g.Pad-g.KW)/g.Stride+1
		yv, ya := refConv2d(x.Float64s(), w.Float64s(), g)
		xv, xa := refConv2dInputGrad(w.Float64s(), dy.Float64s(), g)
		wv, wa := refConv2dWeightGrad(x.Float64s(), dy.Float64s(), g)
		for _, c := range []struct {
			what  string
			weft  func() *tensor.Tensor
			torch *tensor.Tensor
			want  expect
		}{
			{"y", func() *tensor.Tensor { return tensor.Conv2d(x, w, stride, pad) }, load(name + ".y"),
				bounded(dtype.BF16, dtype.F32, nil, yv, ya, g.C*g.KH*g.KW)},
			{"dx", func() *tensor.Tensor { return tensor.Conv2dInputGrad(x, w, dy, stride, pad) }, load(name + ".dx"),
				bounded(dtype.BF16, dtype.F32, nil, xv, xa, inputGradTerms(g))},
			{"dw", func() *tensor.Tensor { return tensor.Conv2dWeightGrad(x, w, dy, stride, pad) }, load(name + ".dw"),
				bounded(dtype.BF16, dtype.F32, nil, wv, wa, g.N*g.OutH*g.OutW)},
		} {
			c.want.shape = c.torch.Shape()
			check(t, fmt.Sprintf("%s: PyTorch's %s", name, c.what), c.torch, c.want)
			torch := c.torch.Float64s()
			for call := range 2 { // the second call reuses the first's scratch
				got := c.weft()
				check(t, fmt.Sprintf("%s: weft's %s (call %d)", name, c.what, call), got, c.want)
				differ := 0
				for i, v := range got.Float64s() {
					if v != torch[i] {
						differ++
					}
				}
				if call == 0 {
					t.Logf("%s %s: %d of %d elements differ from PyTorch's", name, c.what, differ, got.Len())
				}
				tensor.Release(got)
			}
		}
	}
	if cases == 0 {
		t.Fatalf("%s holds no cases", torchConvFile)
	}
}
