package fp8

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

func TestUpdateScale(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for _, c := range []struct {
		amax, prev float32
		margin     int
		want       float32
	}{
		{2, 5, 0, 224},
		{2, 5, 1, 112}, // each unit of margin halves the scale
		{2, 5, 3, 28},
		{448, 5, 0, 1},
		{0, 5, 0, 5}, // no information about the range: keep the scale
		{inf, 5, 0, 5},
		{nan, 5, 0, 5},
		{0x1p-149, 5, 0, math.MaxFloat32}, // 448/amax overflows float32
	} {
		if got := updateScale(c.amax, c.prev, 448, c.margin); got != c.want {
			t.Errorf("updateScale(amax %v, prev %v, 448, margin %d) = %v, want %v", c.amax, c.prev, c.margin, got, c.want)
		}
	}
}

// filled returns a 2×2 float32 matrix whose amax is a.
func filled(a float32) *tensor.Tensor { return tensor.FromFloat32([]float32{a, 0, -a / 2, 0}, 2, 2) }

// TestDelayedHistory casts a tensor with amaxes 4, 2, 1, 0.5, NaN, 0.25 in
// turn, with a history of 3: each cast uses the scale of the history before
// it (the first, scale 1), then its amax enters the history, evicting the
// oldest, and the scale is recomputed.
func TestDelayedHistory(t *testing.T) {
	amaxes := []float32{4, 2, 1, 0.5, float32(math.NaN()), 0.25}
	for _, c := range []struct {
		algo AmaxAlgo
		want []float32 // the scale of each cast
	}{
		// max: 4 stays until it rolls out at the fourth; the NaN then blocks updates for 3 casts.
		{AmaxMax, []float32{1, 112, 112, 112, 224, 224}},
		{AmaxMostRecent, []float32{1, 112, 224, 448, 896, 896}},
	} {
		p := NewDelayed()
		p.HistoryLen, p.Algo = 3, c.algo
		l := p.layer("fc")
		for i, a := range amaxes {
			op := l.quantize(roleX, filled(a), dtype.E4M3FN, training).along(1)
			if op.scale != 1/c.want[i] {
				t.Errorf("algo %d, cast %d (amax %v): inverse scale %v, want 1/%v", c.algo, i, a, op.scale, c.want[i])
			}
			// A checkpointed forward's recompute casts with the same scale and
			// records nothing: the history checked below would differ.
			if re := l.quantize(roleX, filled(a), dtype.E4M3FN, again).along(1); re.scale != op.scale {
				t.Errorf("algo %d, cast %d: the recompute's inverse scale %v, want the first forward's %v", c.algo, i, re.scale, op.scale)
			}
			// An evaluation casts with the scale the next training cast will
			// use and records nothing, whatever its amax.
			if ev := l.quantize(roleX, filled(1000), dtype.E4M3FN, evaluation).along(1); i+1 < len(c.want) && ev.scale != 1/c.want[i+1] {
				t.Errorf("algo %d, after cast %d: an evaluation's inverse scale %v, want 1/%v", c.algo, i, ev.scale, c.want[i+1])
			}
			if got := op.t.Float32s()[0]; a == a && got != dtype.E4M3FN.RoundSat(a*c.want[i]) {
				t.Errorf("algo %d, cast %d: element %v cast to %v, want E4M3(%v·%v) saturated", c.algo, i, a, got, a, c.want[i])
			}
		}
		h := l.scales[roleX].history
		if len(h) != 3 || h[0] != 0.5 || h[1] == h[1] || h[2] != 0.25 {
			t.Errorf("algo %d: history %v, want [0.5 NaN 0.25]", c.algo, h)
		}
		if l.scales[roleW].scale != 1 || l.scales[roleDY].history != nil {
			t.Errorf("algo %d: casting x changed the state of w or dy", c.algo)
		}
	}
}

// TestDelayedFormatMax checks that each role's scale targets its format's
// max: E4M3 for x and w, E5M2 for dy under Hybrid.
func TestDelayedFormatMax(t *testing.T) {
	x, w, b, dy := exactLinear()
	p := NewDelayed()
	l := newLinear(w, b)
	if err := p.ConvertModule("fc", l); err != nil {
		t.Fatal(err)
	}
	var tp autograd.Tape
	if _, _, _, _, err := step(&tp, l, x, dy); err != nil {
		t.Fatal(err)
	}
	s := p.layers["fc"].scales
	for r, want := range [numRoles]float32{448 / 1.75, 448 / 1.75, 57344 / 1.75} {
		if got := s[r].scale; got != want {
			t.Errorf("%s: scale %v after one step with amax 1.75, want %v", roleNames[r], got, want)
		}
	}
}

// TestDelayedState round-trips the state of a converted, trained layer
// exactly (NaN amaxes included), restores it into a plugin before its model
// is converted, and rejects state that is not its own.
func TestDelayedState(t *testing.T) {
	x, w, b, dy := exactLinear()
	p := NewDelayed()
	l := newLinear(w, b)
	if err := p.ConvertModule("blocks.0.fc", l); err != nil {
		t.Fatal(err)
	}
	var tp autograd.Tape
	for range 3 {
		if _, _, _, _, err := step(&tp, l, x, dy); err != nil {
			t.Fatal(err)
		}
	}
	p.layers["blocks.0.fc"].scales[roleDY].history[1] = math.Float32frombits(0x7fc00123) // a NaN with a payload
	saved, err := p.MarshalState()
	if err != nil {
		t.Fatal(err)
	}

	q := NewDelayed()
	if err := q.UnmarshalState(saved); err != nil {
		t.Fatal(err)
	}
	again, err := q.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, saved) {
		t.Fatalf("state does not round-trip:\nsaved    %s\nrestored %s", saved, again)
	}
	// Restored before conversion, the state is what the layer then uses.
	lq := newLinear(w, b)
	if err := q.ConvertModule("blocks.0.fc", lq); err != nil {
		t.Fatal(err)
	}
	yp, _, _, _, err := step(&tp, l, x, dy)
	if err != nil {
		t.Fatal(err)
	}
	yq, _, _, _, err := step(&tp, lq, x, dy)
	if err != nil {
		t.Fatal(err)
	}
	sameTensor(t, "y after restoring", yq, yp)
	for r := range numRoles {
		sp, sq := p.layers["blocks.0.fc"].scales[r], q.layers["blocks.0.fc"].scales[r]
		if sp.scale != sq.scale || !slices.EqualFunc(sp.history, sq.history, func(a, b float32) bool {
			return math.Float32bits(a) == math.Float32bits(b)
		}) {
			t.Errorf("%s: after one more step the restored state %v differs from %v", roleNames[r], sq, sp)
		}
	}

	for _, bad := range []string{
		`{"fc":{"x":{"scale":1065353216},"w":{"scale":1065353216}}}`,                                                       // no dy
		`{"fc":{"x":{"scale":1065353216},"w":{"scale":1065353216},"z":{"scale":1065353216}}}`,                              // unknown role
		`{"fc":{"x":{"scale":0},"w":{"scale":1065353216},"dy":{"scale":1065353216}}}`,                                      // scale 0
		`{"fc":{"x":{"scale":2139095040},"w":{"scale":1065353216},"dy":{"scale":1065353216}}}`,                             // scale inf
		`{"fc":{"x":{"scale":1065353216,"amax_history":[3212836864]},"w":{"scale":1065353216},"dy":{"scale":1065353216}}}`, // amax -1
		`[1, 2]`,
	} {
		before, _ := q.MarshalState()
		if err := q.UnmarshalState([]byte(bad)); err == nil {
			t.Errorf("UnmarshalState(%s) accepted it", bad)
		}
		if after, _ := q.MarshalState(); !bytes.Equal(after, before) {
			t.Errorf("UnmarshalState(%s) failed but changed the state", bad)
		}
	}
	short := NewDelayed()
	short.HistoryLen = 2
	if err := short.UnmarshalState(saved); err == nil {
		t.Error("a plugin with history length 2 accepted 3 saved amaxes")
	}
	// State that does not mention a layer resets it.
	if err := q.UnmarshalState([]byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if s := q.layers["blocks.0.fc"].scales[roleX]; s.scale != 1 || s.history != nil {
		t.Errorf("after restoring empty state the layer has scale %v, history %v; want 1, none", s.scale, s.history)
	}
}
