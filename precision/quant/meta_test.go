package quant_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision/quant"
	"github.com/weftml/weft/tensor"
)

// TestMetaQuantizedBytes: quantizing a meta tensor gives a meta weight
// whose Bytes are those of quantizing real values of the same shape, in
// every mode: sizes that split into partial code bytes, partial blocks
// and partial nested blocks included.
func TestMetaQuantizedBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, shape := range [][]int{{10, 576}, {7, 9}, {1, 1}, {300, 64}, {129, 257}} {
		real, meta := randn(rng, 1, shape...), tensor.Meta(dtype.F32, shape...)
		for _, cb := range []*quant.Codebook{quant.NF4, quant.FP4} {
			for _, double := range []bool{false, true} {
				want := quant.Quantize4(cb, real, quant.DefaultBlockSize, double)
				got := quant.Quantize4(cb, meta, quant.DefaultBlockSize, double)
				if got.Bytes() != want.Bytes() || got.Format() != want.Format() || !got.Codes.IsMeta() {
					t.Errorf("%s %v double %v: meta %s of %d bytes (codes meta %v), real %s of %d", cb.Name(), shape, double, got.Format(), got.Bytes(), got.Codes.IsMeta(), want.Format(), want.Bytes())
				}
			}
		}
		want, _ := quant.QuantizeRows(real, 0)
		got, _ := quant.QuantizeRows(meta, quant.DefaultThreshold)
		if got.Bytes() != want.Bytes() || !got.Codes.IsMeta() || got.Format() != "int8" {
			t.Errorf("int8 %v: meta %d bytes (codes meta %v), real %d", shape, got.Bytes(), got.Codes.IsMeta(), want.Bytes())
		}
	}
}

// TestQuantizersReportDeclines: a quantizer says which Linear it left as
// it was and why (the skip pattern), and nothing for those it converted.
func TestQuantizersReportDeclines(t *testing.T) {
	type reporter interface {
		converter
		Declined(path string) (string, bool)
	}
	for _, p := range []reporter{quant.NewFourBit(quant.NF4, true), quant.NewInt8(false), quant.NewInt8(true)} {
		m := models.NewMLP(nn.Meta(0))
		var err error
		nn.Walk(m, func(path string, mod nn.Module) {
			if err == nil {
				err = p.ConvertModule(path, mod)
			}
		})
		if err != nil {
			t.Fatalf("%s on a meta mlp: %v", p.Name(), err)
		}
		if why, ok := p.Declined("head"); !ok || !strings.Contains(why, `"head"`) {
			t.Errorf("%s: head declined %v because %q, want the skip pattern named", p.Name(), ok, why)
		}
		if why, ok := p.Declined("fc1"); ok {
			t.Errorf("%s converted fc1 but says it declined it: %s", p.Name(), why)
		}
		if m.FC1.GEMM == nil {
			t.Errorf("%s left fc1 of a meta mlp unconverted", p.Name())
		}
	}
}
