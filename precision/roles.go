// Package precision makes numeric precision composable. A plugin is any
// value with a Name; what it does is the set of role interfaces below that it
// implements. The fabric and the strategies ask for roles through the helper
// functions at the bottom of this file, never for a concrete plugin type.
package precision

import (
	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
)

// Plugin is the whole required interface of a precision plugin.
type Plugin interface {
	// Name is the plugin's spec string ("bf16-mixed"); checkpoint state is
	// keyed by it.
	Name() string
}

// ModuleConverter converts the model before training: casts parameters,
// replaces layers. If no plugin implements it, the model trains as built.
type ModuleConverter interface {
	ConvertModule(m nn.Module) error
}

// Autocaster is the compute role: inside the forward scope it picks the
// dtype each op's floating inputs are cast to (autograd.Caster). If no
// plugin implements it, every op runs in its inputs' dtype.
type Autocaster interface {
	autograd.Caster
}

// InputCaster gives the dtype floating inputs are cast to on entering the
// forward scope. If no plugin implements it, inputs pass unchanged.
type InputCaster interface {
	InputDType() dtype.DType
}

// OutputCaster gives the dtype floating outputs are cast to on leaving the
// forward scope. If no plugin implements it, outputs pass unchanged.
type OutputCaster interface {
	OutputDType() dtype.DType
}

// LossScaler owns loss scaling for the whole model. If no plugin
// implements it, the fabric uses a scaler that never scales or skips.
type LossScaler interface {
	Scaler() Scaler
}

// OptimizerStater picks the dtype of optimizer state (Adam's moments). If
// no plugin implements it, state takes each parameter's dtype, as in PyTorch.
type OptimizerStater interface {
	OptimizerStateDType() dtype.DType
}

// Stateful plugins have state that belongs in a checkpoint (a loss scale, a
// growth tracker), saved under the plugin's Name. Plugins without it save nothing.
type Stateful interface {
	MarshalState() ([]byte, error)
	UnmarshalState([]byte) error
}

// Autocast returns p's compute role, or nil (ops run in their inputs' dtype).
func Autocast(p Plugin) autograd.Caster {
	if a, ok := p.(Autocaster); ok {
		return a
	}
	return nil
}

// InputDType returns the dtype p casts floating inputs to; ok is false when
// inputs pass unchanged.
func InputDType(p Plugin) (dt dtype.DType, ok bool) {
	if c, ok := p.(InputCaster); ok {
		return c.InputDType(), true
	}
	return dtype.Invalid, false
}

// OutputDType returns the dtype p casts floating outputs to; ok is false
// when outputs pass unchanged.
func OutputDType(p Plugin) (dt dtype.DType, ok bool) {
	if c, ok := p.(OutputCaster); ok {
		return c.OutputDType(), true
	}
	return dtype.Invalid, false
}

// ScalerOf returns p's loss scaler, or one that does nothing.
func ScalerOf(p Plugin) Scaler {
	if s, ok := p.(LossScaler); ok {
		return s.Scaler()
	}
	return noScaler{}
}

// OptimizerStateDType returns the dtype p wants optimizer state in;
// ok is false when state follows the parameters.
func OptimizerStateDType(p Plugin) (dt dtype.DType, ok bool) {
	if o, ok := p.(OptimizerStater); ok {
		return o.OptimizerStateDType(), true
	}
	return dtype.Invalid, false
}

// ConvertModule applies p's module conversion, if it has one.
func ConvertModule(p Plugin, m nn.Module) error {
	if c, ok := p.(ModuleConverter); ok {
		return c.ConvertModule(m)
	}
	return nil
}

// Enter opens p's forward scope on tp: its compute role becomes the tape's
// caster until the returned exit function restores the previous one. Call
// exit with defer so that an error or panic restores the engine too.
func Enter(p Plugin, tp *autograd.Tape) (exit func()) {
	prev := tp.Caster
	tp.Caster = Autocast(p)
	return func() { tp.Caster = prev }
}
