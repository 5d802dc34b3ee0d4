package fabric

import (
	"errors"
	"fmt"
	"math"

	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
)

// ClipGradValue unscales the gradients (once per step) and clamps every
// element to [-clip, clip], as torch.nn.utils.clip_grad_value_ does. An
// element-wise clamp needs no communication: each rank clamps what it
// holds, whole gradients or its chunks of them.
func (f *Fabric) ClipGradValue(clip float64) error {
	if !(clip > 0) || math.IsInf(clip, 0) {
		return fmt.Errorf("fabric: clip value %g: must be positive and finite", clip)
	}
	params, err := f.unscaled()
	if err != nil {
		return err
	}
	for _, p := range params {
		if p.Var.Grad != nil {
			p.Var.Grad.ClampInPlace(-clip, clip)
		}
	}
	return nil
}

// clip clips the step's gradients as Config.ClipValue or ClipNorm says,
// noting the norm in res.
func (f *Fabric) clip(res *StepResult) (err error) {
	switch {
	case f.cfg.ClipValue > 0:
		return f.ClipGradValue(f.cfg.ClipValue)
	case f.cfg.ClipNorm > 0:
		res.GradNorm, err = f.ClipGradNorm(f.cfg.ClipNorm)
	}
	return err
}

// unscaled unscales the optimizer's gradients, unless this step's are
// already, and returns its parameters.
func (f *Fabric) unscaled() ([]nn.NamedParam, error) {
	if err := f.ready("clipping gradients"); err != nil {
		return nil, err
	}
	params := f.opt.Params()
	if err := f.scaler.Unscale(params); err != nil && !errors.Is(err, precision.ErrUnscaledTwice) {
		return nil, err
	}
	return params, nil
}
