package parity

import (
	"fmt"
	"math"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/models"
)

// Target names the reference run a pure-dtype replay is compared with, and
// the relative loss tolerance it must meet.
type Target struct {
	Run string
	Tol float64
}

// Targets maps the dtypes `weft parity --dtype` accepts to their reference runs.
var Targets = map[dtype.DType]Target{
	dtype.F64: {Run: "float64-manual", Tol: 1e-9},
	dtype.F32: {Run: "32-true", Tol: 1e-4},
}

// CompareLosses checks every step's loss against the reference within a
// relative tolerance; a null reference loss must be non-finite here too.
func CompareLosses(got []Loss, want []*float64, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d losses, reference has %d", len(got), len(want))
	}
	for s, w := range want {
		g := float64(got[s])
		finite := !math.IsNaN(g) && !math.IsInf(g, 0)
		switch {
		case w == nil && finite:
			return fmt.Errorf("step %d: loss %.9g, reference is non-finite", s, g)
		case w != nil && !finite:
			return fmt.Errorf("step %d: loss %v, reference %.9g", s, g, *w)
		case w != nil && math.Abs(g-*w) > tol*math.Abs(*w):
			return fmt.Errorf("step %d: loss %.12g, reference %.12g (relative error %.2g > %.0g)", s, g, *w, math.Abs(g-*w)/math.Abs(*w), tol)
		}
	}
	return nil
}

// CompareFinal64 checks every final parameter elementwise against
// <model>.final64.<param> within an absolute tolerance.
func CompareFinal64(ref *models.Reference, res *Result, tol float64) error {
	for _, p := range res.Params {
		want, err := ref.Final64(res.Model, p.Path)
		if err != nil {
			return err
		}
		w, g := want.Float64s(), p.Var.Value.Float64s()
		if len(w) != len(g) {
			return fmt.Errorf("%s: %d elements, reference has %d", p.Path, len(g), len(w))
		}
		for i := range w {
			if d := math.Abs(g[i] - w[i]); !(d <= tol) {
				return fmt.Errorf("%s[%d] = %.15g, reference %.15g (difference %.2g > %.0g)", p.Path, i, g[i], w[i], d, tol)
			}
		}
	}
	return nil
}
