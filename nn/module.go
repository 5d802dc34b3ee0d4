// Package nn builds models as trees of modules whose parameters carry the
// dotted paths of PyTorch's state_dict ("blocks.0.qkv.weight").
package nn

import (
	"fmt"
	"reflect"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// A Module is a node of a model tree. Forward methods are not part of the
// interface: their inputs differ from layer to layer.
type Module interface {
	// Params returns the module's own parameters (not its children's) in
	// registration order.
	Params() []Param
	// Children returns the named submodules in registration order.
	Children() []Child
}

// Param is a parameter under its local name ("weight").
type Param struct {
	Name string
	Var  *autograd.Var
}

// Child is a submodule under its local name ("fc1", "0").
type Child struct {
	Name   string
	Module Module
}

// NamedParam is a parameter under its dotted path from the root.
type NamedParam struct {
	Path string
	Var  *autograd.Var
}

// Walk calls fn for m and every descendant in PyTorch's named_modules
// order (pre-order), with dotted paths; the root's path is "".
func Walk(m Module, fn func(path string, m Module)) {
	walk("", m, fn)
}

func walk(path string, m Module, fn func(string, Module)) {
	fn(path, m)
	for _, c := range m.Children() {
		walk(Join(path, c.Name), c.Module, fn)
	}
}

// Join appends a local name to a dotted path ("" is the root).
func Join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// Parameters lists every parameter of the tree in named_parameters order.
func Parameters(m Module) []NamedParam {
	var out []NamedParam
	Walk(m, func(path string, m Module) {
		for _, p := range m.Params() {
			out = append(out, NamedParam{Path: Join(path, p.Name), Var: p.Var})
		}
	})
	return out
}

// Kind is a module's type name ("Linear", "Conv2d"), used by kind: rules.
func Kind(m Module) string {
	t := reflect.TypeOf(m)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if i := indexByte(t.Name(), '['); i >= 0 { // generic types: List[...]
		return t.Name()[:i]
	}
	return t.Name()
}

func indexByte(s string, c byte) int {
	for i := range len(s) {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// Load copies tensors into the tree's parameters by dotted path, converting
// dtype; every parameter must be present with the right shape.
func Load(m Module, get func(path string) (*tensor.Tensor, error)) error {
	for _, p := range Parameters(m) {
		t, err := get(p.Path)
		if err != nil {
			return err
		}
		if !t.SameShape(p.Var.Value) {
			return fmt.Errorf("nn: %s: shape %v does not match the model's %v", p.Path, t.Shape(), p.Var.Value.Shape())
		}
		p.Var.Value.CopyFrom(t)
	}
	return nil
}

// CastOwn converts m's own parameters (not its children's) to dt in place,
// dropping any gradient: one module's part of PyTorch's .to(dtype), for
// trees whose modules get different dtypes.
//
// The old storage is freed, as .to frees it (a reference to the old value
// kept past the cast fails loudly).
func CastOwn(m Module, dt dtype.DType) {
	for _, p := range m.Params() {
		old := p.Var.Value
		p.Var.Value, p.Var.Grad = old.To(dt), nil
		if p.Var.Value != old {
			tensor.Drop(old)
		}
	}
}

// List is an ordered container whose children are named "0", "1", ...
type List[M Module] []M

func (l List[M]) Params() []Param { return nil }

func (l List[M]) Children() []Child {
	out := make([]Child, len(l))
	for i, m := range l {
		out[i] = Child{Name: fmt.Sprint(i), Module: m}
	}
	return out
}
