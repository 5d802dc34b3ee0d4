package quant_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/precision/quant"
	"github.com/weftml/weft/tensor"
)

// roundTrip saves tensors and metadata as safetensors and parses them back.
func roundTrip(t *testing.T, tensors []checkpoint.Tensor, meta map[string]string) *checkpoint.File {
	t.Helper()
	var buf bytes.Buffer
	if err := checkpoint.EncodeSafetensors(&buf, tensors, meta); err != nil {
		t.Fatal(err)
	}
	f, err := checkpoint.ParseSafetensors(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestFileFormats saves a bf16 matrix in every format and reads it back:
// the tensors are named as documented and decode to what the in-memory
// quantization gives (fp8, which has none: within E4M3's rounding).
func TestFileFormats(t *testing.T) {
	w := randn(rand.New(rand.NewPCG(1, 2)), 0.05, 48, 40).To(dtype.BF16) // 30 blocks of 64
	for _, c := range []struct {
		format string
		names  []string
		want   *tensor.Tensor // what the in-memory quantization decodes to; nil for fp8
	}{
		{"nf4", []string{"fc.weight.absmax", "fc.weight.nf4"}, quant.Quantize4(quant.NF4, w, 64, false).Dequantize(dtype.BF16)},
		{"nf4-dq", []string{"fc.weight.absmax", "fc.weight.nested_absmax", "fc.weight.nested_offset", "fc.weight.nf4"}, quant.Quantize4(quant.NF4, w, 64, true).Dequantize(dtype.BF16)},
		{"fp4", []string{"fc.weight.absmax", "fc.weight.fp4"}, quant.Quantize4(quant.FP4, w, 64, false).Dequantize(dtype.BF16)},
		{"fp4-dq", []string{"fc.weight.absmax", "fc.weight.fp4", "fc.weight.nested_absmax", "fc.weight.nested_offset"}, quant.Quantize4(quant.FP4, w, 64, true).Dequantize(dtype.BF16)},
		{"int8", []string{"fc.weight.absmax", "fc.weight.int8"}, int8Rows(w).Dequantize(dtype.BF16)},
		{"fp8", []string{"fc.weight.fp8", "fc.weight.scale"}, nil},
	} {
		tensors, meta, err := quant.QuantizeTensor("fc.weight", w, c.format)
		if err != nil {
			t.Fatalf("%s: %v", c.format, err)
		}
		f := roundTrip(t, tensors, map[string]string{"fc.weight": meta})
		if names := f.Names(); !slices.Equal(names, slices.Sorted(slices.Values(c.names))) {
			t.Errorf("%s: tensors %v, want %v", c.format, names, c.names)
		}
		got, err := quant.DequantizeTensor(f, "fc.weight")
		if err != nil {
			t.Fatalf("%s: %v", c.format, err)
		}
		if got.DType() != dtype.BF16 || !got.SameShape(w) {
			t.Fatalf("%s: read back %v, want %v", c.format, got, w)
		}
		if c.want != nil {
			sameBytes(t, c.format+" read back", got, c.want)
			continue
		}
		// E4M3 keeps 3 mantissa bits (relative error 2^-4) down to
		// 2^-6·amax/448, steps of 2^-9·amax/448 below; bf16 adds 2^-9.
		ws, gs := w.Float64s(), got.Float64s()
		amax := 0.0
		for _, v := range ws {
			amax = max(amax, math.Abs(v))
		}
		for i := range ws {
			if d := math.Abs(gs[i] - ws[i]); d > math.Abs(ws[i])/14+amax/448/1024 {
				t.Errorf("%s: element %d = %v reads back as %v", c.format, i, ws[i], gs[i])
				break
			}
		}
	}
}

func int8Rows(w *tensor.Tensor) *quant.RowWise {
	q, _ := quant.QuantizeRows(w, 0)
	return q
}

func TestFileErrors(t *testing.T) {
	w := randn(rand.New(rand.NewPCG(3, 4)), 1, 32, 32)
	tensors, meta, err := quant.QuantizeTensor("w", w, "nf4-dq")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := quant.QuantizeTensor("w", w, "nf3"); err == nil || !strings.Contains(err.Error(), "nf4-dq") {
		t.Errorf("unknown format: error %v, want one listing the formats", err)
	}
	if _, _, err := quant.QuantizeTensor("w", w.Reshape(1024), "int8"); err == nil {
		t.Error("int8 of a vector: no error")
	}
	drop := func(name string) []checkpoint.Tensor {
		return slices.DeleteFunc(slices.Clone(tensors), func(c checkpoint.Tensor) bool { return c.Name == name })
	}
	short := slices.Clone(tensors)
	for i, c := range short {
		if c.Name == "w.nf4" {
			short[i].Data, short[i].Shape = c.Data[:len(c.Data)-2], []int{len(c.Data) - 2}
		}
	}
	for _, c := range []struct {
		name    string
		tensors []checkpoint.Tensor
		meta    string
		want    string
	}{
		{"no metadata", tensors, "", "no quantized tensor"},
		{"bad metadata", tensors, "{", "metadata"},
		{"unknown format", tensors, strings.Replace(meta, "nf4-dq", "nf5", 1), "nf5"},
		{"missing offset", drop("w.nested_offset"), meta, "w.nested_offset"},
		{"short codes", short, meta, "do not fit"},
	} {
		m := map[string]string{}
		if c.meta != "" {
			m["w"] = c.meta
		}
		_, err := quant.DequantizeTensor(roundTrip(t, c.tensors, m), "w")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
}
