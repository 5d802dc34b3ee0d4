package quant

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// LoRA adds trainable low-rank adapters to Linear layers (Hu et al. 2021,
// as Hugging Face peft builds them): a targeted layer computes
// y = base(x) + (Alpha/Rank)·B(A(x)), where base is the layer's own
// arithmetic (a plain or quantized Linear, or any other plugin's GEMM), A
// [Rank, in] starts Kaiming-uniform (bound 1/sqrt(in)) and B [out, Rank]
// at zero, so that a fresh adapter changes nothing. Composed after a
// quantizer (nf4-dq then LoRA) it is QLoRA.
//
// The adapters become parameters of the Linear they adapt
// ("blocks.0.qkv.lora_A.weight"), so that strategies shard and reduce
// them and checkpoints save them with their optimizer moments; Params
// lists just them, for an optimizer that trains only the adapters. LoRA
// freezes nothing itself; training only its Params leaves the rest of the
// model as it is. Adapters and ToFloat take them out for export.
type LoRA struct {
	Rank  int     // 8
	Alpha float64 // 16
	// Targets lists the module paths to adapt, as FourBit's Skip.
	Targets []string
	Seed    uint64 // with the module path, seeds each A

	adapters map[string]*lora // by module path
	params   []nn.NamedParam  // in conversion order
}

// NewLoRA returns a plugin adding adapters of rank and alpha to the
// Linears whose paths match targets.
func NewLoRA(rank int, alpha float64, targets ...string) *LoRA {
	return &LoRA{Rank: rank, Alpha: alpha, Targets: targets}
}

func (p *LoRA) Name() string { return "lora" }

// Params returns the adapters, under the paths peft gives them
// ("blocks.0.qkv.lora_A.weight", "blocks.0.qkv.lora_B.weight").
func (p *LoRA) Params() []nn.NamedParam { return p.params }

// ConvertModule adds an adapter to m if it is a targeted Linear. Each path
// gets one adapter: converting a second model with the same plugin is an
// error, as the two would share it.
func (p *LoRA) ConvertModule(path string, m nn.Module) error {
	if p.Rank < 1 || math.IsNaN(p.Alpha) || math.IsInf(p.Alpha, 0) {
		return fmt.Errorf("quant: lora rank %d, alpha %v: want rank ≥ 1 and a finite alpha", p.Rank, p.Alpha)
	}
	l, ok := m.(*nn.Linear)
	if !ok || installedBy(l.GEMM, p) {
		return nil
	}
	if target, err := matches(p.Targets, path); !target || err != nil {
		return err
	}
	if p.adapters[path] != nil {
		return fmt.Errorf("quant: lora already adapts a Linear at %q; use one plugin a model", path)
	}
	in, out, err := features(path, l)
	if err != nil {
		return err
	}
	h := fnv.New64a()
	h.Write([]byte(path))
	rng := rand.New(rand.NewPCG(p.Seed, h.Sum64()))
	bound := 1 / math.Sqrt(float64(in)) // kaiming_uniform_(a=√5): √(6/((1+5)·in))
	a := make([]float32, p.Rank*in)
	for i := range a {
		a[i] = float32((2*rng.Float64() - 1) * bound)
	}
	g := &lora{
		owner: p, wraps: l.GEMM, scale: p.Alpha / float64(p.Rank),
		a: autograd.Param(tensor.FromFloat32(a, p.Rank, in)),
		b: autograd.Param(tensor.FromFloat32(make([]float32, out*p.Rank), out, p.Rank)),
	}
	l.GEMM = g
	if p.adapters == nil {
		p.adapters = map[string]*lora{}
	}
	p.adapters[path] = g
	p.params = append(p.params,
		nn.NamedParam{Path: path + ".lora_A.weight", Var: g.a},
		nn.NamedParam{Path: path + ".lora_B.weight", Var: g.b})
	return nil
}

// features returns l's input and output sizes, from its weight or, once a
// quantizer has taken the weight, from the quantized one.
func features(path string, l *nn.Linear) (in, out int, err error) {
	if l.Weight != nil {
		return l.Weight.Value.Dim(1), l.Weight.Value.Dim(0), nil
	}
	if w, ok := WeightOf(l); ok {
		return w.Shape()[1], w.Shape()[0], nil
	}
	return 0, 0, fmt.Errorf("quant: lora cannot size the adapter of %q: its weight is gone into %T", path, l.GEMM)
}

// lora is an adapted Linear's arithmetic.
type lora struct {
	owner *LoRA
	wraps nn.LinearGEMM // the layer's own GEMM; nil for the tape's Linear
	a, b  *autograd.Var // [rank, in], [out, rank]
	scale float64       // alpha/rank
}

// Linear adds the adapter's output, cast to the dtype of the base output,
// to it, as peft does.
func (g *lora) Linear(tp *autograd.Tape, x, w, b *autograd.Var) *autograd.Var {
	var y *autograd.Var
	if g.wraps != nil {
		y = g.wraps.Linear(tp, x, w, b)
	} else {
		y = tp.Linear(x, w, b)
	}
	d := tp.Scale(tp.Linear(tp.Linear(x, g.a, nil), g.b, nil), g.scale) // (…, out)
	return tp.Add(y, tp.Cast(d, y.Value.DType()))
}

var _ nn.ParamGEMM = (*lora)(nil)

// Params makes the adapters parameters of the Linear they adapt
// (nn.ParamGEMM), under peft's names, so that strategies, checkpoints and
// optimizers see them.
func (g *lora) Params() []nn.Param {
	return []nn.Param{{Name: "lora_A.weight", Var: g.a}, {Name: "lora_B.weight", Var: g.b}}
}

// Materialize quantizes the wrapped GEMM's weight if it was built on
// shapes alone (see deferred), as fabric's setup asks of every GEMM.
func (g *lora) Materialize() {
	if d, ok := g.wraps.(interface{ Materialize() }); ok {
		d.Materialize()
	}
}

func (g *lora) installer() plugin   { return g.owner }
func (g *lora) base() nn.LinearGEMM { return g.wraps }

// Frozen is the wrapped GEMM's, if it holds a frozen weight (QLoRA).
func (g *lora) Frozen() []nn.Frozen {
	if f, ok := g.wraps.(nn.FrozenGEMM); ok {
		return f.Frozen()
	}
	return nil
}
