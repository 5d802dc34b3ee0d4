package strategy

import (
	"reflect"

	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// unit is a sharding unit, as PyTorch's fully_shard makes one of a
// module: its parameters are gathered just before its forward, freed
// after it, gathered again for its backward, and its gradients are
// reduced as soon as its backward is done.
type unit struct {
	path   string
	params []int // indices into Rank.shards
	// gather is the all-gather in flight for the unit's freed parameters,
	// nil when none is; got receives what it gathers, by shard.
	gather *call
	got    []gathered
}

// UnitFunc reports whether the module at path is a sharding unit of its
// own; its descendants then are not asked.
type UnitFunc func(path string, m nn.Module) bool

// DefaultUnits makes a unit of every element of a List (each transformer
// block) and of every child that holds no such element (the embeddings, a
// final LayerNorm, a head; each layer of a model without lists), as one
// would call fully_shard on them by hand.
func DefaultUnits(path string, m nn.Module) bool { return !holdsList(m) }

func holdsList(m nn.Module) bool {
	if nn.Kind(m) == "List" {
		return true
	}
	for _, c := range m.Children() {
		if holdsList(c.Module) {
			return true
		}
	}
	return false
}

// A TiedModel reads some modules' parameters outside those modules (a
// language model whose head is its token embedding, transposed). Units
// makes none of the Tied modules a unit: their parameters stay in the
// root, gathered for the whole forward and backward, as FSDP2 needs a
// shared parameter in the unit of a common ancestor.
type TiedModel interface {
	Tied() []nn.Module
}

// Unit is a module that is a sharding unit of its own.
type Unit struct {
	Path   string
	Module nn.Module
}

// Units lists the units isUnit (nil: DefaultUnits) picks in m, in
// pre-order (the order of a sequential forward), as NewRank groups the
// parameters. A list is never one: it has no forward of its own.
func Units(m nn.Module, isUnit UnitFunc) []Unit {
	if isUnit == nil {
		isUnit = DefaultUnits
	}
	tied := map[nn.Module]bool{}
	if t, ok := m.(TiedModel); ok {
		for _, mod := range t.Tied() {
			tied[mod] = true
		}
	}
	var units []Unit
	var visit func(path string, m nn.Module)
	visit = func(path string, m nn.Module) {
		for _, c := range m.Children() {
			cp := nn.Join(path, c.Name)
			if reflect.TypeOf(c.Module).Comparable() && tied[c.Module] { // lists are not
				continue // the root's
			}
			if nn.Kind(c.Module) == "List" || !isUnit(cp, c.Module) {
				visit(cp, c.Module)
				continue
			}
			units = append(units, Unit{Path: cp, Module: c.Module})
		}
	}
	visit("", m)
	return units
}

// findUnits walks the tree in pre-order (the order of a sequential
// forward) and returns the units isUnit picks, each with the shards of its
// parameters and frozen weights (indices into shards), and the root: every
// shard outside a unit.
func findUnits(m nn.Module, isUnit UnitFunc, shards []shard) (units []unit, of map[any]int, root unit) {
	index := map[**tensor.Tensor]int{}
	for i, s := range shards {
		index[s.slot] = i
	}
	inUnit := map[int]bool{}
	members := func(m nn.Module) (out []int) {
		nn.Walk(m, func(_ string, mod nn.Module) {
			var slots []**tensor.Tensor
			for _, p := range mod.Params() {
				if p.Var != nil {
					slots = append(slots, &p.Var.Value)
				}
			}
			for _, fz := range nn.FrozenOf(mod) {
				slots = append(slots, fz.Value)
			}
			for _, slot := range slots {
				if i, ok := index[slot]; ok && !inUnit[i] {
					out, inUnit[i] = append(out, i), true
				}
			}
		})
		return out
	}
	of = map[any]int{}
	for _, u := range Units(m, isUnit) {
		of[u.Module] = len(units)
		units = append(units, unit{path: u.Path, params: members(u.Module)})
	}
	for i := range shards {
		if !inUnit[i] {
			root.params = append(root.params, i)
		}
	}
	return units, of, root
}
