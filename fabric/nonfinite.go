package fabric

import (
	"context"
	"errors"
	"reflect"
	"strconv"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/nn"
)

// FirstNonFinite reruns a forward pass, recording nothing, with every
// module's output checked as it leaves the module, and returns the path of
// the first module whose output holds inf or NaN ("" if none does): where
// a numerical blow-up starts.
func (f *Fabric) FirstNonFinite(fn func(tp *autograd.Tape) (*autograd.Var, error)) (string, error) {
	return f.firstNonFinite(context.Background(), fn)
}

func (f *Fabric) firstNonFinite(ctx context.Context, fn func(tp *autograd.Tape) (*autograd.Var, error)) (string, error) {
	if f.plan == nil {
		return "", errors.New("fabric: FirstNonFinite before Setup: call Setup(model, optimizer) first")
	}
	spy := &nanSpy{paths: map[any]string{}}
	for _, s := range f.plan.Scopes {
		if reflect.TypeOf(s.Module).Comparable() {
			spy.paths[s.Module] = s.Path
		}
	}
	f.spy = spy
	f.tape.NoGrad = true
	defer func() { f.spy, f.tape.NoGrad = nil, false }()
	if _, err := f.forward(ctx, fn); err != nil {
		return "", err
	}
	return spy.first, nil
}

// nanSpy wraps the precision scopes and notes the first module output
// that is not finite.
type nanSpy struct {
	inner autograd.Scoper
	paths map[any]string
	first string
}

func (s *nanSpy) EnterScope(tp *autograd.Tape, module any, x *autograd.Var) (*autograd.Var, func(*autograd.Var) *autograd.Var) {
	in, exit := s.inner.EnterScope(tp, module, x)
	return in, func(out *autograd.Var) *autograd.Var {
		out = exit(out)
		if path, ok := s.paths[module]; ok && s.first == "" && out != nil && out.Value.HasNonFinite() {
			s.first = strconv.Quote(path)
			if m, ok := module.(nn.Module); ok {
				s.first += " (" + nn.Kind(m) + ")"
			}
		}
		return out
	}
}
