package fabric

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
)

// forwardPrecision is a precision a forward pass runs in: its root plugin
// (input and output casts, autocast) and its module scopes.
type forwardPrecision struct {
	plugin precision.Plugin
	scopes *precision.Scopes
}

// evalPrecision resolves p, Config.EvalPrecision, over m, which training
// converted as trained says: nil for none. It refuses what an evaluation
// over the weights as training stores them cannot compute in p.
func evalPrecision(m nn.Module, p precision.Plugin, trained *precision.Resolution) (*forwardPrecision, error) {
	if isNil(p) {
		return nil, nil
	}
	if precision.ConvertsModules(p) {
		return nil, fmt.Errorf("fabric: eval precision %s converts modules (FP8 or quantized Linears), which an evaluation over the trained weights cannot; evaluate in a spec without conversion, such as 32-true or bf16-mixed", p.Name())
	}
	for _, s := range trained.Scopes {
		if len(s.Converted) > 0 {
			return nil, fmt.Errorf("fabric: eval precision %s: training's %s replaced the arithmetic of %s, which an evaluation would still run; drop the eval precision", p.Name(), strings.Join(s.Converted, "+"), cmp.Or(s.Path, "the model"))
		}
	}
	if dt, ok := precision.StorageDType(p); ok {
		for _, w := range nn.Parameters(m) {
			if w.Var.Value.DType() != dt {
				return nil, fmt.Errorf("fabric: eval precision %s computes over weights stored in %v, and training stores %s in %v; evaluate in %s or a mixed spec (bf16-mixed, 16-mixed), which compute over the weights as stored", p.Name(), dt, w.Path, w.Var.Value.DType(), keeping(w.Var.Value.DType()))
			}
		}
	}
	res, err := precision.Policy{Default: precision.Once(p)}.Resolve(m, precision.LossScalingAuto)
	if err != nil {
		return nil, fmt.Errorf("fabric: eval precision: %w", err)
	}
	return &forwardPrecision{plugin: res.Root, scopes: res.Scoper()}, nil
}

// keeping names a spec that computes over weights stored in dt.
func keeping(dt dtype.DType) string {
	switch dt {
	case dtype.BF16:
		return "bf16-true"
	case dtype.F16:
		return "16-true"
	case dtype.F64:
		return "64-true"
	}
	return "32-true"
}

// enter makes e the precision of f's forward passes until the returned
// function restores training's; a nil e keeps training's.
func (e *forwardPrecision) enter(f *Fabric) (exit func()) {
	if e == nil {
		return func() {}
	}
	plugin, scopes := f.plugin, f.scopes
	f.plugin, f.scopes = e.plugin, e.scopes
	return func() { f.plugin, f.scopes = plugin, scopes }
}
