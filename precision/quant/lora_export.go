package quant

import (
	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// Adapter is one LoRA adapter of a model, as an export writes it.
type Adapter struct {
	Module string         // the Linear it adapts, "blocks.0.qkv"
	A, B   *tensor.Tensor // [rank, in] and [out, rank], float32 copies
	Rank   int            // 8
	Alpha  float64        // 16
}

// Adapters lists the LoRA adapters installed in m, in the tree's order.
func Adapters(m nn.Module) []Adapter {
	var out []Adapter
	nn.Walk(m, func(path string, mod nn.Module) {
		if g := loraOf(mod); g != nil {
			out = append(out, Adapter{Module: path, A: float32Copy(g.a.Value), B: float32Copy(g.b.Value),
				Rank: g.owner.Rank, Alpha: g.owner.Alpha})
		}
	})
	return out
}

// loraOf is the LoRA arithmetic of m, if m is an adapted Linear.
func loraOf(m nn.Module) *lora {
	l, ok := m.(*nn.Linear)
	if !ok {
		return nil
	}
	for g := range layers(l.GEMM) {
		if g, ok := g.(*lora); ok {
			return g
		}
	}
	return nil
}

// ToFloat gives every Linear of m whose arithmetic this package installed
// a float32 weight of its own in place of that arithmetic, for a model
// file: the quantized weight dequantized (or the layer's weight, cast),
// and, with merge, LoRA's adapter added to it as W + (Alpha/Rank)·B·A;
// without merge the adapters go (list them with Adapters first). The GEMM
// of another plugin that this package's wrapped stays.
func ToFloat(m nn.Module, merge bool) {
	nn.Walk(m, func(_ string, mod nn.Module) {
		l, ok := mod.(*nn.Linear)
		if !ok {
			return
		}
		var rest nn.LinearGEMM = l.GEMM // what remains below this package's GEMMs
		for g := range layers(l.GEMM) {
			rest = g.base()
		}
		if rest == l.GEMM {
			return
		}
		w := baseWeight(l)
		if g := loraOf(l); g != nil && merge {
			addProduct(w, g.b.Value, g.a.Value, g.scale)
		}
		l.Weight, l.GEMM = autograd.Param(w), rest
	})
}

// baseWeight is l's weight in float32, a fresh tensor: dequantized if this
// package holds it quantized.
func baseWeight(l *nn.Linear) *tensor.Tensor {
	if q, ok := WeightOf(l); ok {
		return q.Dequantize(dtype.F32)
	}
	return float32Copy(l.Weight.Value)
}

// float32Copy is a fresh float32 tensor of t's values.
func float32Copy(t *tensor.Tensor) *tensor.Tensor {
	return tensor.FromFloat32(t.Float32s(), t.Shape()...)
}

// addProduct adds scale·b·a to w in place (w [out, in], b [out, rank],
// a [rank, in]), each element's sum taken in float64.
func addProduct(w, b, a *tensor.Tensor, scale float64) {
	out, in, rank := w.Dim(0), w.Dim(1), a.Dim(0)
	wv, bv, av := w.Float32s(), b.Float64s(), a.Float64s()
	for o := range out {
		for i := range in {
			var d float64
			for r := range rank {
				d += bv[o*rank+r] * av[r*in+i]
			}
			wv[o*in+i] = float32(float64(wv[o*in+i]) + scale*d)
		}
	}
	w.CopyFrom(tensor.FromFloat32(wv, out, in))
}
