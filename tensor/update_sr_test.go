package tensor_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/philox"
	"github.com/weftml/weft/tensor"
)

// TestAdamWStepStochastic: a bfloat16 parameter rounded stochastically
// takes, bit for bit, dtype.BF16StochasticRound of the float32 update
// (adamWRef without rounding) with the Philox words of its elements'
// indices; the moments round to nearest in their dtype. Updated in two
// chunks whose bits start at their offsets, it takes the same bits.
func TestAdamWStepStochastic(t *testing.T) {
	const n, cut = 1000, 389
	key, stream := [2]uint32{7, 0}, [2]uint32{3, 5}
	for _, stateDT := range []dtype.DType{dtype.BF16, dtype.F32} {
		rng := rand.New(rand.NewPCG(9, 9))
		p, p32, _ := state(rng, dtype.BF16, n, false)
		g, g32, _ := state(rng, dtype.BF16, n, false)
		m, m32, _ := state(rng, stateDT, n, false)
		v, v32, _ := state(rng, stateDT, n, true)
		ps, ms, vs := p.Float32s(), m.Float32s(), v.Float32s()
		s := adamWScalars(3)
		s.Stochastic = &tensor.StochasticBits{Key: key, Stream: stream, First: 11}
		tensor.AdamWStep(p, g, m, v, s)

		adamWRef(p32, g32, m32, v32, s, func(x float32) float32 { return x })
		bits := make([]uint16, n)
		philox.Uint16s(bits, key, stream, 11)
		away := 0 // elements not rounded to nearest
		for i := range p32 {
			x := p32[i]
			p32[i] = dtype.F32FromBF16(dtype.BF16StochasticRound(x, bits[i]))
			if p32[i] != dtype.BF16.Round(x) {
				away++
			}
			m32[i], v32[i] = stateDT.Round(m32[i]), stateDT.Round(v32[i])
		}
		if away < n/10 {
			t.Errorf("%v moments: %d of %d elements rounded away from nearest, want about a quarter", stateDT, away, n)
		}
		what := fmt.Sprintf("bf16 AdamW, %v moments, rounded stochastically", stateDT)
		equal(t, what, dtype.BF16, []*tensor.Tensor{p}, [][]float64{widen(p32)})
		equal(t, what, stateDT, []*tensor.Tensor{m, v}, [][]float64{widen(m32), widen(v32)})

		var chunks [3][]float64 // p, m and v updated in two chunks
		for _, c := range [][2]int{{0, cut}, {cut, n}} {
			part := func(vals []float32, dt dtype.DType) *tensor.Tensor {
				return tensor.FromFloat64(widen(vals[c[0]:c[1]]), c[1]-c[0]).To(dt)
			}
			pc, gc, mc, vc := part(ps, dtype.BF16), part(g.Float32s(), dtype.BF16), part(ms, stateDT), part(vs, stateDT)
			sc := s
			sc.Stochastic = &tensor.StochasticBits{Key: key, Stream: stream, First: 11 + uint64(c[0])}
			tensor.AdamWStep(pc, gc, mc, vc, sc)
			for k, x := range []*tensor.Tensor{pc, mc, vc} {
				chunks[k] = append(chunks[k], x.Float64s()...)
			}
		}
		equal(t, what+" in two chunks", dtype.BF16, []*tensor.Tensor{p}, chunks[:1])
		equal(t, what+" in two chunks", stateDT, []*tensor.Tensor{m, v}, chunks[1:])
	}
}
