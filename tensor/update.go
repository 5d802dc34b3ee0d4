package tensor

import (
	"math"
	"sort"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/philox"
	"github.com/weftml/weft/internal/vec"
)

// AdamWScalars are the per-step constants of AdamW, computed in float64 on
// the host as PyTorch does, and converted to the compute type by the kernel.
type AdamWScalars struct {
	Decay       float64 // 1 - lr·weight_decay
	Lerp        float64 // 1 - β1
	Beta2       float64 // β2
	OneMinusB2  float64 // 1 - β2
	BC2Sqrt     float64 // sqrt(1 - β2^t)
	Eps         float64
	NegStepSize float64 // -lr / (1 - β1^t)
	// Stochastic, if set, rounds a bfloat16 p's new values stochastically
	// (see StochasticBits); nil rounds them to nearest even.
	Stochastic *StochasticBits
	// Torchao, if set, has AdamWLowBitStep step as torchao's optimizers
	// do (adamWTorchao), with these constants instead of the above.
	Torchao *TorchaoScalars
}

// StochasticBits are the random bits of torchao's bf16_stochastic_round
// for one tensor: element i rounds with word First+i of the Philox
// stream (Key, Stream) (philox.Uint16s), so that a chunk of a parameter
// whose First is its offset draws the bits the whole parameter would.
// With Runs, the parameter is a tensor-parallel share of a whole one, and
// element i draws the word of its index in the whole: that of the run r
// with the largest At <= First+i, r.Word + First+i - r.At.
type StochasticBits struct {
	Key, Stream [2]uint32 // (seed), (optimizer step, parameter index)
	First       uint64    // index of the tensor's element 0 in its parameter
	Runs        []WordRun // sorted by At, the first at 0; nil for a whole parameter
}

// WordRun is a stretch of a share's elements that lie side by side in the
// whole parameter: share element At is whole element Word, and so on up
// to the next run's At.
type WordRun struct{ At, Word uint64 }

// stochasticRun is the most elements round takes at once: their words
// stay in L1 beside them.
const stochasticRun = 256

// round rounds xs, the tensor's elements from lo on (stochasticRun at
// most), to bfloat16 with their words, keeping them as float32.
func (b *StochasticBits) round(xs []float32, lo int) {
	var words [stochasticRun]uint16
	r := words[:len(xs)]
	b.fill(r, lo)
	for i, x := range xs {
		xs[i] = dtype.F32FromBF16(dtype.BF16StochasticRound(x, r[i]))
	}
}

// fill writes to r the words of elements [lo, lo+len(r)) of the tensor.
func (b *StochasticBits) fill(r []uint16, lo int) {
	j := b.First + uint64(lo)
	if b.Runs == nil {
		philox.Uint16s(r, b.Key, b.Stream, j)
		return
	}
	k := sort.Search(len(b.Runs), func(k int) bool { return b.Runs[k].At > j }) - 1
	for len(r) > 0 {
		n := len(r)
		if k+1 < len(b.Runs) {
			n = min(n, int(b.Runs[k+1].At-j))
		}
		philox.Uint16s(r[:n], b.Key, b.Stream, b.Runs[k].Word+j-b.Runs[k].At)
		r, j, k = r[n:], j+uint64(n), k+1
	}
}

// AdamWStep updates p, m and v in place with PyTorch 2.11's single-tensor
// AdamW, one tensor op at a time, each rounded to the dtype of the tensor it
// writes (denom takes v's dtype):
//
//	p = p·decay; m = m + lerp·(g-m); v = v·β2; v = v + (1-β2)·g·g
//	d = sqrt(v); d = d/bc2sqrt; d = d + eps; p = p + negStep·(m/d)
//
// With s.Stochastic set and p bfloat16, it is torchao's single_param_adam
// with bf16_stochastic_round instead: every op in float32, the moments
// rounded to their dtype (to nearest even) only as they are stored, p's
// update computed from their float32 values and rounded to bfloat16 with
// dtype.BF16StochasticRound and s.Stochastic's bits.
func AdamWStep(p, g, m, v *Tensor, s AdamWScalars) {
	switch {
	case s.Stochastic != nil && p.dtype == dtype.BF16:
		adamWStochastic(p, g, m, v, s)
	case p.dtype == dtype.F64:
		adamW[float64](p, g, m, v, s)
	default:
		adamW[float32](p, g, m, v, s)
	}
}

// LowBitMoments are AdamW's moments as a low-bit optimizer keeps them
// (optim/lowbit): codes, raw bytes in tensors of any dtype, and float32
// scales, one a block, that the codecs decode to float32 and encode back.
type LowBitMoments struct {
	M, V           *Tensor // codes
	MScale, VScale *Tensor // float32
	MCodec, VCodec MomentCodec
}

// MomentCodec turns float32 moments into codes and a scale a block, and
// back (lowbit.Codec).
type MomentCodec interface {
	Encode(x []float32, codes []byte, scales []float32)
	Decode(codes []byte, scales []float32, out []float32)
}

// AdamWLowBitStep is AdamWStep over moments held as low-bit codes: it
// decodes m and v to float32, updates them and p (AdamWStep, or with
// s.Torchao set torchao's single_param_adam, adamWTorchao), p from their
// float32 values, and encodes them again with each block's new scale. The
// float32 copies are pool scratch, given back before it returns.
func AdamWLowBitStep(p, g *Tensor, st LowBitMoments, s AdamWScalars) {
	n := p.Len()
	m, v := empty(dtype.F32, n), empty(dtype.F32, n)
	st.MCodec.Decode(st.M.data, st.MScale.f32(), m.f32())
	st.VCodec.Decode(st.V.data, st.VScale.f32(), v.f32())
	if s.Torchao != nil {
		adamWTorchao(p, g, m.f32(), v.f32(), s)
	} else {
		AdamWStep(p, g, m, v, s)
	}
	st.MCodec.Encode(m.f32(), st.M.data, st.MScale.f32())
	st.VCodec.Encode(v.f32(), st.V.data, st.VScale.f32())
	Free(m)
	Free(v)
}

// TorchaoScalars are the per-step constants of torchao's
// single_param_adam, each a float32 as its 0-dim tensors hold them.
type TorchaoScalars struct {
	LR      float32 // the group's lr tensor
	LRDecay float32 // lr·weight_decay
	BC1     float32 // 1 - β1^t
	BC2Sqrt float32 // sqrt(1 - β2^t)
	W1, W2  float32 // lerp weights 1-β1, 1-β2
	Eps     float32
}

// adamWTorchao updates p, m and v (float32) as torchao's
// single_param_adam does in eager PyTorch on the CPU, every op in float32
// on p and g read as float32:
//
//	p = p - lrDecay·p; m = lerp(m, g, w1); v = lerp(v, g·g, w2)
//	d = sqrt(v)/bc2sqrt + eps; p = p - (lr·(m/bc1))/d
//
// lerp(a, b, w) being fma(w, b-a, a) for w < 0.5 and fma(w-1, b-a, b)
// otherwise, as ATen's vectorized lerp computes it; then p is rounded to
// its dtype once, stochastically with s.Stochastic's bits for bfloat16.
// The fused multiply-add is taken in float64 and rounded to float32,
// which rounds twice only where the float64 sum lands on a float32 tie.
func adamWTorchao(p, g *Tensor, ms, vs []float32, s AdamWScalars) {
	ps, gs := get[float32](p), get[float32](g)
	c := *s.Torchao
	stochastic := s.Stochastic != nil && p.dtype == dtype.BF16
	run := func(lo, hi int) {
		for at := lo; at < hi; at += stochasticRun {
			end := min(at+stochasticRun, hi)
			for i := at; i < end; i++ {
				pi := ps[i] - float32(c.LRDecay*ps[i])
				gi := gs[i]
				mi := lerp(ms[i], gi, c.W1)
				vi := lerp(vs[i], float32(gi*gi), c.W2)
				d := float32(math.Sqrt(float64(vi)))/c.BC2Sqrt + c.Eps
				ps[i] = pi - float32(c.LR*(mi/c.BC1))/d
				ms[i], vs[i] = mi, vi
			}
			if stochastic {
				s.Stochastic.round(ps[at:end], at)
			}
		}
	}
	parallelFor(len(ps), run)
	put(p, ps)
	drop(g, gs)
}

// lerp is ATen's vectorized lerp of float32s (see adamWTorchao).
func lerp(a, b, w float32) float32 {
	d := float64(b - a)
	if w < 0.5 {
		return float32(math.FMA(float64(w), d, float64(a)))
	}
	return float32(math.FMA(float64(w-1), d, float64(b)))
}

func adamW[T float](p, g, m, v *Tensor, s AdamWScalars) {
	ps, gs, ms, vs := get[T](p), get[T](g), get[T](m), get[T](v)
	rp, rm, rv := roundTo[T](p.dtype), roundTo[T](m.dtype), roundTo[T](v.dtype)
	if parallelParts(len(ps)) <= 1 {
		adamWRange(ps, gs, ms, vs, rp, rm, rv, s)
	} else {
		parallelFor(len(ps), func(lo, hi int) {
			adamWRange(ps[lo:hi], gs[lo:hi], ms[lo:hi], vs[lo:hi], rp, rm, rv, s)
		})
	}
	put(p, ps)
	put(m, ms)
	put(v, vs)
	drop(g, gs)
}

// adamWRange updates one range of elements, op by op over chunks that stay
// in L1, each op's results rounded (for low-precision tensors) before the
// next op reads them. The T conversions round products before their sums,
// so that no build fuses them into a multiply-add. In float32 with each
// tensor float32 or bfloat16, vec.AdamWBF16 gives the same bits running all
// the ops on each element in registers, rounding between them.
func adamWRange[T float](ps, gs, ms, vs []T, rp, rm, rv rounding[T], s AdamWScalars) {
	inVec := func(r rounding[T]) bool { return !r.on || r.dt == dtype.BF16 }
	if p, ok := any(ps).([]float32); ok && inVec(rp) && inVec(rm) && inVec(rv) {
		vec.AdamWBF16(p, any(gs).([]float32), any(ms).([]float32), any(vs).([]float32), s.float32s(), rp.on, rm.on, rv.on)
		return
	}
	decay, lerp, b2, omb2 := T(s.Decay), T(s.Lerp), T(s.Beta2), T(s.OneMinusB2)
	bc2, eps, step := T(s.BC2Sqrt), T(s.Eps), T(s.NegStepSize)
	var d [256]T
	for lo := 0; lo < len(ps); lo += len(d) {
		hi := min(lo+len(d), len(ps))
		p, g, m, v, d := ps[lo:hi], gs[lo:hi], ms[lo:hi], vs[lo:hi], d[:hi-lo]
		for i := range p {
			p[i] *= decay
		}
		rp.all(p)
		for i := range m {
			m[i] += T(lerp * (g[i] - m[i]))
		}
		rm.all(m)
		for i := range v {
			v[i] *= b2
		}
		rv.all(v)
		for i := range v {
			v[i] += T(omb2 * g[i] * g[i])
		}
		rv.all(v)
		for i := range d {
			d[i] = T(math.Sqrt(float64(v[i])))
		}
		rv.all(d)
		for i := range d {
			d[i] /= bc2
		}
		rv.all(d)
		for i := range d {
			d[i] += eps
		}
		rv.all(d)
		for i := range p {
			p[i] += T(step * (m[i] / d[i]))
		}
		rp.all(p)
	}
}

// float32s are s in float32, as the kernels of vec take them.
func (s AdamWScalars) float32s() vec.AdamWParams {
	return vec.AdamWParams{
		Decay: float32(s.Decay), Lerp: float32(s.Lerp), Beta2: float32(s.Beta2),
		OneMinusBeta2: float32(s.OneMinusB2), BC2Sqrt: float32(s.BC2Sqrt), Eps: float32(s.Eps),
		NegStep: float32(s.NegStepSize),
	}
}

// adamWStochastic is AdamWStep over a bfloat16 p rounded stochastically.
func adamWStochastic(p, g, m, v *Tensor, s AdamWScalars) {
	ps, gs, ms, vs := get[float32](p), get[float32](g), get[float32](m), get[float32](v)
	rm, rv := roundTo[float32](m.dtype), roundTo[float32](v.dtype)
	bits := *s.Stochastic
	run := func(lo, hi int) {
		b := bits
		b.First += uint64(lo)
		adamWStochasticRange(ps[lo:hi], gs[lo:hi], ms[lo:hi], vs[lo:hi], rm, rv, s, b)
	}
	if parallelParts(len(ps)) <= 1 {
		run(0, len(ps))
	} else {
		parallelFor(len(ps), run)
	}
	put(p, ps)
	put(m, ms)
	put(v, vs)
	drop(g, gs)
}

// adamWStochasticRange updates one range of elements, whose bits start at
// bits.First, over chunks that stay in L1: vec.AdamW in float32, then the
// moments rounded to nearest and p stochastically.
func adamWStochasticRange(ps, gs, ms, vs []float32, rm, rv rounding[float32], s AdamWScalars, bits StochasticBits) {
	params := s.float32s()
	for lo := 0; lo < len(ps); lo += stochasticRun {
		hi := min(lo+stochasticRun, len(ps))
		p, m, v := ps[lo:hi], ms[lo:hi], vs[lo:hi]
		vec.AdamW(p, gs[lo:hi], m, v, params)
		rm.all(m)
		rv.all(v)
		bits.round(p, lo)
	}
}

// SGDStep updates p in place: p = p + (-lr)·g, rounded to p's dtype.
func SGDStep(p, g *Tensor, lr float64) {
	if p.dtype == dtype.F64 {
		sgd[float64](p, g, lr)
	} else {
		sgd[float32](p, g, lr)
	}
}

func sgd[T float](p, g *Tensor, lr float64) {
	ps, gs, r := get[T](p), get[T](g), roundTo[T](p.dtype)
	neg := T(-lr)
	if parallelParts(len(ps)) <= 1 {
		sgdRange(ps, gs, r, neg)
	} else {
		parallelFor(len(ps), func(lo, hi int) { sgdRange(ps[lo:hi], gs[lo:hi], r, neg) })
	}
	put(p, ps)
	drop(g, gs)
}

func sgdRange[T float](ps, gs []T, r rounding[T], neg T) {
	for i := range ps {
		ps[i] = r.do(ps[i] + T(neg*gs[i]))
	}
}

// ScaleInPlace multiplies t by s, rounding to t's dtype (unscaling gradients).
func (t *Tensor) ScaleInPlace(s float64) {
	if t.dtype == dtype.F64 {
		scaleAll(t.f64(), t.f64(), s)
		return
	}
	vals := get[float32](t)
	scaleAll(vals, vals, float32(s))
	put(t, vals)
}

// AddInPlace adds u to t, rounding each sum once to t's dtype: the same
// numbers as Add, without a new tensor (gradient accumulation).
func (t *Tensor) AddInPlace(u *Tensor) {
	mustSameShape("AddInPlace", t, u)
	if t.dtype == dtype.F64 || u.dtype == dtype.F64 {
		addInPlace[float64](t, u)
	} else {
		addInPlace[float32](t, u)
	}
}

func addInPlace[T float](t, u *Tensor) {
	ts, us := get[T](t), get[T](u)
	if parallelParts(len(ts)) <= 1 {
		addRange(ts, us)
	} else {
		parallelFor(len(ts), func(lo, hi int) { addRange(ts[lo:hi], us[lo:hi]) })
	}
	put(t, ts)
	drop(u, us)
}

func addRange[T float](ts, us []T) {
	for i, v := range us {
		ts[i] += v
	}
}

// ClampInPlace limits every element of t to [lo, hi] (torch.clamp_, as
// clip_grad_value_ applies it); NaN stays NaN.
func (t *Tensor) ClampInPlace(lo, hi float64) {
	if t.dtype == dtype.F64 {
		clampInPlace(t.f64(), lo, hi)
		return
	}
	vals := get[float32](t)
	clampInPlace(vals, float32(lo), float32(hi))
	put(t, vals)
}

func clampInPlace[T float](vals []T, lo, hi T) {
	for i, v := range vals {
		vals[i] = max(lo, min(hi, v))
	}
}

// AbsMax returns the largest |v| among t's elements in float32, NaN if one
// is NaN (torch.amax of t.abs(): an FP8 scale's amax).
func (t *Tensor) AbsMax() float32 {
	vals := get[float32](t)
	defer drop(t, vals)
	return vec.AbsMax(vals)
}

// UnscaleTo returns t/scale rounded to dt, the quotient taken in float32:
// the values of a tensor quantized with ScaleTo.
func UnscaleTo(t *Tensor, scale float32, dt dtype.DType) *Tensor {
	vals, out32 := get[float32](t), scratch[float32](t.Len())
	for i, v := range vals {
		out32[i] = v / scale
	}
	out := empty(dt, t.shape...)
	encode(dt, out.data, out32, false)
	release(out32)
	drop(t, vals)
	return out
}

// ScaleTo returns t·scale rounded to dt with saturation, the product taken
// in float32: a tensor quantized to FP8 with a per-tensor scale.
func ScaleTo(t *Tensor, scale float32, dt dtype.DType) *Tensor {
	if t.meta {
		return Meta(dt, t.shape...)
	}
	vals, scaled := get[float32](t), scratch[float32](t.Len())
	for i, v := range vals {
		scaled[i] = v * scale
	}
	out := empty(dt, t.shape...)
	encode(dt, out.data, scaled, true)
	release(scaled)
	drop(t, vals)
	return out
}

// SetShape gives t a new shape with the same number of elements, in place:
// for a tensor its maker has not handed out yet (a view would cost a
// header that does not own the storage).
func (t *Tensor) SetShape(shape ...int) {
	mustFit(t.Len(), shape)
	t.setShape(shape)
}
