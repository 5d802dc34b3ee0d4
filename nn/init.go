package nn

import (
	"fmt"
	"math"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/philox"
	"github.com/weftml/weft/tensor"
)

// Init numbers the parameters of one model build and draws their initial
// values from a seed. Values are counter-based (see ParamInit): element i
// of parameter j is a pure function of (seed, j, i), so a rank of a sharded
// strategy can draw its chunk of a parameter alone (InitRange) and get the
// single-device values bit for bit. Like rand.Rand, an Init is not safe for
// concurrent use: each build makes its own.
type Init struct {
	seed uint64
	next uint64 // the number of the next parameter created
	meta bool
}

// NewInit builds parameters with their initial values drawn from seed.
func NewInit(seed uint64) *Init { return &Init{seed: seed} }

// Meta builds parameters on shapes alone: a layer constructor given it
// (NewLinear(nn.Meta(seed), 4096, 4096, true)) makes its parameters
// tensor.Meta values, which have a dtype and a shape and no storage, so
// that a plan converts and measures a model of any size without memory for
// its weights. Each parameter still records the ParamInit that NewInit(seed)
// would have filled it from, for InitRange.
func Meta(seed uint64) *Init { return &Init{seed: seed, meta: true} }

// Dist is the distribution of a parameter's elements.
type Dist uint8

const (
	Const   Dist = iota // every element A
	Uniform             // uniform in [A, B)
	Normal              // normal with mean A and standard deviation B
)

// ParamInit is how one parameter's initial value is drawn. Element i comes
// from the Philox4x32-10 block at counter (i, Stream) under key Seed: one
// block per element, so the element depends on (Seed, Stream, i) alone, and
// no two elements of any parameters of one seed share a block.
type ParamInit struct {
	Dist   Dist
	A, B   float64 // see Dist
	Seed   uint64
	Stream uint64 // the parameter's number in its build
}

// Fill writes elements [start, start+len(dst)) of the flat initial value.
func (p ParamInit) Fill(dst []float32, start int) {
	if p.Dist == Const {
		for i := range dst {
			dst[i] = float32(p.A)
		}
		return
	}
	key := [2]uint32{uint32(p.Seed), uint32(p.Seed >> 32)}
	for i := range dst {
		e := uint64(start + i)
		b := philox.Block([4]uint32{uint32(e), uint32(e >> 32), uint32(p.Stream), uint32(p.Stream >> 32)}, key)
		u := float64((uint64(b[0])<<32|uint64(b[1]))>>11) * 0x1p-53 // [0, 1)
		switch p.Dist {
		case Uniform:
			dst[i] = float32(p.A + (p.B-p.A)*u)
		case Normal: // Box–Muller on the block's two uniforms
			v := float64((uint64(b[2])<<32|uint64(b[3]))>>11) * 0x1p-53
			dst[i] = float32(p.A + p.B*math.Sqrt(-2*math.Log(1-u))*math.Cos(2*math.Pi*v))
		default:
			panic(fmt.Sprintf("nn: unknown distribution %d", p.Dist))
		}
	}
}

// InitRange returns elements [start, start+n) of v's flat (row-major)
// initial value as float32 [n], the values a build with NewInit gives them:
// how a sharded strategy fills in its chunk of a parameter built on
// Meta. It fails if v records no initialiser or the range runs outside v.
func InitRange(v *autograd.Var, start, n int) (*tensor.Tensor, error) {
	if v.Init == nil {
		return nil, fmt.Errorf("nn: parameter %v records no initialiser to draw elements from", v.Value)
	}
	if start < 0 || n < 0 || start+n > v.Value.Len() {
		return nil, fmt.Errorf("nn: elements [%d, %d) of a parameter of %d", start, start+n, v.Value.Len())
	}
	return tensor.Generate(func(dst []float32) { v.Init.Fill(dst, start) }, n), nil
}

// param returns the build's next parameter, float32 of shape, drawn from
// dist with parameters a and b (meta on Meta).
func (in *Init) param(dist Dist, a, b float64, shape ...int) *autograd.Var {
	p := ParamInit{Dist: dist, A: a, B: b, Seed: in.seed, Stream: in.next}
	in.next++
	t := tensor.Meta(dtype.F32, shape...)
	if !in.meta { // in pool storage, so that tensor.Memory counts the weights
		t = tensor.Generate(func(dst []float32) { p.Fill(dst, 0) }, shape...)
	}
	v := autograd.Param(t)
	v.Init = p
	return v
}
