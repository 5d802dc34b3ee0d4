package fp8

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/weftml/weft/comm"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision/internal/declined"
	"github.com/weftml/weft/tensor"
)

// AmaxAlgo is how delayed scaling reduces a tensor's amax history to the
// amax its scale is computed from.
type AmaxAlgo int

const (
	AmaxMax        AmaxAlgo = iota // the largest in the history ("max")
	AmaxMostRecent                 // the last one ("most_recent")
)

func (a AmaxAlgo) reduce(history []float32) float32 {
	if a == AmaxMostRecent {
		return history[len(history)-1]
	}
	return amaxOf(history) // amaxes are not negative: the largest |·| is the largest
}

// Delayed is the "fp8" plugin: Transformer Engine's DelayedScaling. Each
// tensor of an FP8 Linear (input, weight, output gradient) is cast with a
// scale computed from the amaxes of its earlier casts, so the cast needs no
// pass over the tensor first: the first cast uses scale 1, and after each
// one the tensor's amax enters its history and the scale is recomputed.
// Set the fields before the model is converted.
type Delayed struct {
	Format     Format   // Hybrid
	HistoryLen int      // 1024: amaxes remembered per tensor
	Algo       AmaxAlgo // AmaxMax
	Margin     int      // 0: scales are divided by 2^Margin
	Filter     Filter   // nil: DefaultFilter

	layers map[string]*delayedLayer // by module path
	// ranks, if set, makes each amax the maximum over data-parallel
	// ranks, as Transformer Engine's amax reduction does, so that every
	// rank casts with the same scales.
	ranks    comm.Agreement
	declines declined.Log
}

// AgreeOver makes every amax the maximum over ranks; the fabric calls it
// when it trains on several ranks.
func (p *Delayed) AgreeOver(r comm.Agreement) { p.ranks = r }

// NewDelayed returns the recipe with Transformer Engine's defaults.
func NewDelayed() *Delayed {
	return &Delayed{Format: Hybrid, HistoryLen: 1024}
}

func (*Delayed) Name() string { return "fp8" }

// Declined says why ConvertModule left the Linear at path as it was (the
// precision.ConversionReporter role).
func (p *Delayed) Declined(path string) (string, bool) { return p.declines.Why(path) }

// ConvertModule gives m FP8 GEMMs if it is an eligible Linear; its scaling
// state is kept under path.
func (p *Delayed) ConvertModule(path string, m nn.Module) error {
	if p.HistoryLen < 1 {
		return fmt.Errorf("fp8: amax history length %d, want at least 1", p.HistoryLen)
	}
	l, why, err := eligible(m, p.Format, p.Filter, p)
	if l == nil {
		p.declines.Note(path, why)
		return err
	}
	layer := p.layer(path)
	if layer.mod != nil && layer.mod != l {
		return fmt.Errorf("fp8: a Linear at %q is already converted by this plugin; use one plugin per model", path)
	}
	layer.mod = l
	l.GEMM = &linear{owner: p, format: p.Format, q: layer}
	return nil
}

// GatherFormat sends the weight of a converted Linear as FP8 bytes with the
// scale its next cast uses, so that an FSDP all-gather moves one byte per
// weight and the Linear's own cast of the gathered values changes nothing.
func (p *Delayed) GatherFormat(param string) (dtype.DType, float32, bool) {
	l, ok := p.weightLayer(param)
	if !ok {
		return dtype.Invalid, 0, false
	}
	return p.Format.Forward, l.scales[roleW].scale, true
}

// layer returns the state kept under path, creating it if needed: state
// may be restored before the model is converted.
func (p *Delayed) layer(path string) *delayedLayer {
	l, ok := p.layers[path]
	if !ok {
		if p.layers == nil { // a Delayed built without NewDelayed
			p.layers = map[string]*delayedLayer{}
		}
		l = &delayedLayer{recipe: p, scales: freshScales()}
		p.layers[path] = l
	}
	return l
}

// delayedLayer is the delayed-scaling state of one Linear.
type delayedLayer struct {
	recipe *Delayed
	mod    *nn.Linear // nil until the Linear is converted
	scales [numRoles]scaleState
	// gathered is the weight as FSDP gathered it (UseGathered), nil while
	// the layer casts its weight itself.
	gathered *gatheredWeight
}

// gatheredWeight is a whole weight's FP8 codes, cast with scale, and this
// rank's chunk of the weight it was cast from.
type gatheredWeight struct {
	codes, chunk *tensor.Tensor
	scale        float32
}

// amaxOr is the amax to record for a cast of t: that of g's chunk (the
// reduction over ranks makes it the whole weight's) if g holds the
// weight, else t's; nil for a meta t, which has no values.
func (g *gatheredWeight) amaxOr(t *tensor.Tensor) *float32 {
	var a float32
	switch {
	case g != nil:
		a = g.chunk.AbsMax()
	case t.IsMeta():
		return nil
	default:
		a = t.AbsMax()
	}
	return &a
}

// UseGathered makes the Linear whose weight is param multiply codes, the
// whole weight cast with scale as FSDP gathered it, instead of casting its
// weight: scale must be that of its next cast, or of its last one (the
// gather for its backward). Its amax is the chunk's, which the reduction
// over ranks makes the whole weight's, so that the scales follow exactly
// those of a rank holding the weight whole.
func (p *Delayed) UseGathered(param string, codes, chunk *tensor.Tensor, scale float32) bool {
	l, ok := p.weightLayer(param)
	if !ok || codes.DType() != p.Format.Forward || (scale != l.scales[roleW].scale && scale != l.scales[roleW].last) {
		return false
	}
	l.gathered = &gatheredWeight{codes: codes, chunk: chunk, scale: scale}
	return true
}

// DropGathered forgets the codes UseGathered gave the Linear of param.
func (p *Delayed) DropGathered(param string) {
	if l, ok := p.weightLayer(param); ok {
		l.gathered = nil
	}
}

// weightLayer is the converted Linear whose weight is param.
func (p *Delayed) weightLayer(param string) (*delayedLayer, bool) {
	module, ok := strings.CutSuffix(param, ".weight")
	if !ok {
		return nil, false
	}
	l, ok := p.layers[module]
	return l, ok && l.mod != nil
}

// scaleState is one tensor's: the scale of its next cast, the amaxes of
// its last casts, oldest first, and the scale of the last cast, with which
// a checkpointed forward's recompute casts again.
type scaleState struct {
	scale, last float32
	history     []float32
}

func freshScales() [numRoles]scaleState {
	return [numRoles]scaleState{{scale: 1}, {scale: 1}, {scale: 1}}
}

func (l *delayedLayer) quantize(r role, t *tensor.Tensor, dt dtype.DType, p pass) quantized {
	s := &l.scales[r]
	g := l.gathered
	if r != roleW || g == nil || g.codes.DType() != dt {
		g = nil
	}
	cast := func(scale float32) quantized {
		if g != nil && g.scale == scale {
			return lent{operand{t: g.codes, scale: 1 / scale}}
		}
		return castScaled(t, scale, dt)
	}
	switch {
	case p == again:
		return cast(s.last)
	case p == evaluation:
		return cast(s.scale)
	}
	amax := g.amaxOr(t)
	if amax == nil { // a plan's pass on meta tensors: no amax to record
		return cast(s.scale)
	}
	*amax = agreed(l.recipe.ranks, *amax)
	q := cast(s.scale)
	s.last = s.scale
	if keep := l.recipe.HistoryLen - 1; len(s.history) > keep { // the newest HistoryLen amaxes, in place
		s.history = s.history[:copy(s.history, s.history[len(s.history)-keep:])]
	}
	s.history = append(s.history, *amax)
	s.scale = updateScale(l.recipe.Algo.reduce(s.history), s.scale, float32(dt.Max()), l.recipe.Margin)
	return q
}

// agreed is the largest amax over ranks (amax itself if ranks is nil).
// A failed reduction gives NaN, with which a scale update keeps the
// scale, and the collective's error ends the step.
func agreed(ranks comm.Agreement, amax float32) float32 {
	if ranks == nil {
		return amax
	}
	m, err := ranks.Max(amax)
	if err != nil {
		return float32(math.NaN())
	}
	return m
}

// savedScale is a scaleState in a checkpoint: float32 values as their bits,
// so that a restore is exact.
type savedScale struct {
	Scale   uint32   `json:"scale"`
	History []uint32 `json:"amax_history,omitempty"`
}

// MarshalState saves every layer's scales and amax histories as JSON,
// by module path and role ("x", "w", "dy").
func (p *Delayed) MarshalState() ([]byte, error) {
	saved := make(map[string]map[string]savedScale, len(p.layers))
	for path, l := range p.layers {
		roles := make(map[string]savedScale, numRoles)
		for r, s := range l.scales {
			h := make([]uint32, len(s.history))
			for i, a := range s.history {
				h[i] = math.Float32bits(a)
			}
			roles[roleNames[r]] = savedScale{Scale: math.Float32bits(s.scale), History: h}
		}
		saved[path] = roles
	}
	return json.Marshal(saved)
}

// UnmarshalState restores what MarshalState saved. Layers the state does
// not mention return to their initial state; on error nothing changes.
func (p *Delayed) UnmarshalState(b []byte) error {
	var saved map[string]map[string]savedScale
	if err := json.Unmarshal(b, &saved); err != nil {
		return fmt.Errorf("fp8: state: %w", err)
	}
	restored := make(map[string][numRoles]scaleState, len(saved))
	for path, roles := range saved {
		scales, err := p.restore(roles)
		if err != nil {
			return fmt.Errorf("fp8: state of %q: %w", path, err)
		}
		restored[path] = scales
	}
	for path, l := range p.layers {
		if _, ok := restored[path]; !ok {
			l.scales = freshScales()
		}
	}
	for path, scales := range restored {
		p.layer(path).scales = scales
	}
	return nil
}

// restore checks and decodes the saved scales of one layer.
func (p *Delayed) restore(roles map[string]savedScale) ([numRoles]scaleState, error) {
	var scales [numRoles]scaleState
	if len(roles) != int(numRoles) {
		return scales, fmt.Errorf("%d roles, want x, w and dy", len(roles))
	}
	for r, name := range roleNames {
		s, ok := roles[name]
		if !ok {
			return scales, fmt.Errorf("no role %q", name)
		}
		scale := math.Float32frombits(s.Scale)
		if !(scale > 0) || math.IsInf(float64(scale), 1) {
			return scales, fmt.Errorf("%s: scale %v, want finite and positive", name, scale)
		}
		if len(s.History) > p.HistoryLen {
			return scales, fmt.Errorf("%s: %d amaxes, history length is %d", name, len(s.History), p.HistoryLen)
		}
		h := make([]float32, len(s.History))
		for i, bits := range s.History {
			if h[i] = math.Float32frombits(bits); h[i] < 0 {
				return scales, fmt.Errorf("%s: negative amax %v", name, h[i])
			}
		}
		scales[r] = scaleState{scale: scale, history: h}
	}
	return scales, nil
}

// Current is the "fp8-current" plugin: Transformer Engine's
// Float8CurrentScaling. Each cast scales a tensor by its own amax, which
// costs a pass over the tensor but follows its range exactly and keeps no
// state; a tensor whose amax is 0, inf or NaN is cast with scale 1.
type Current struct {
	Format Format // Hybrid
	Filter Filter // nil: DefaultFilter
	// ranks, if set, makes each amax the maximum over ranks, so that a
	// split tensor (a tensor-parallel share) or a batch shared among
	// data-parallel ranks is cast with the scale one device would take of
	// it whole.
	ranks    comm.Agreement
	declines declined.Log
	codedLinears
}

// AgreeOver makes every amax the maximum over ranks; the fabric calls it
// when it trains on several ranks.
func (p *Current) AgreeOver(r comm.Agreement) { p.ranks = r }

// NewCurrent returns the recipe with Transformer Engine's defaults.
func NewCurrent() *Current { return &Current{Format: Hybrid} }

func (*Current) Name() string { return "fp8-current" }

// Declined says why ConvertModule left the Linear at path as it was (the
// precision.ConversionReporter role).
func (p *Current) Declined(path string) (string, bool) { return p.declines.Why(path) }

// ConvertModule gives m FP8 GEMMs if it is an eligible Linear.
func (p *Current) ConvertModule(path string, m nn.Module) error {
	l, why, err := eligible(m, p.Format, p.Filter, p)
	if l != nil {
		p.codedLinears.install(path, l, &linear{owner: p, format: p.Format, q: currentScaling{p}})
	}
	p.declines.Note(path, why)
	return err
}

// currentScaling is Current's quantizer.
type currentScaling struct{ recipe *Current }

func (c currentScaling) quantize(_ role, t *tensor.Tensor, dt dtype.DType, _ pass) quantized {
	if t.IsMeta() { // a plan's pass: no amax to take
		return castScaled(t, 1, dt)
	}
	return castScaled(t, updateScale(agreed(c.recipe.ranks, t.AbsMax()), 1, float32(dt.Max()), 0), dt)
}
