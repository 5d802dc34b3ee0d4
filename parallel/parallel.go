// Package parallel splits a model's Linears across a tensor-parallel group
// as Megatron-LM does, by a plan that names module paths (PyTorch's
// parallelize_module with ColwiseParallel and RowwiseParallel): a
// column-parallel Linear keeps its rank's share of the output features, a
// row-parallel one its share of the input features, and a module the plan
// does not name stays replicated.
//
// The collectives sit where Megatron puts them, its conjugate operators f
// and g: before a column-parallel Linear, identity forward and all-reduce
// of the input's gradient backward; after a row-parallel one, all-reduce
// of the partial outputs forward and identity backward. A transformer
// block (column qkv → attention on the rank's heads → row proj, column fc
// → GELU → row out) then runs two all-reduces of its (B, T, C) activation
// forward and two backward, and every replicated parameter gets the same
// gradient on every rank of the group.
package parallel

import (
	"context"
	"fmt"
	pathpkg "path"
	"reflect"
	"slices"
	"strings"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// A Style is how a plan lays out the modules a pattern names: Colwise
// or Rowwise splits a Linear; Sequence and Scatter run a module on the
// rank's share of the sequence (sequence parallelism, see sequence.go).
type Style interface {
	// String is the layout's name in plans: "column", "row",
	// "sequence", ...
	String() string
	// place checks that the style fits mod, at path.
	place(path string, mod nn.Module) error
}

// A linearStyle is a Style that splits a Linear's weight.
type linearStyle interface {
	Style
	// check reports whether n ranks can split a weight of [out, in].
	check(out, in, n int) error
	// share is rank r of n's share of t, the weight or a split bias.
	share(t *tensor.Tensor, r, n int) *tensor.Tensor
	// whole is t's full value from the ranks' shares of it, stacked in
	// rank order ([n, share's shape...]).
	whole(stacked *tensor.Tensor) *tensor.Tensor
	// runs places rank r of n's share of a tensor of the whole shape full
	// in it (see Layout.Runs).
	runs(full []int, r, n int) []Run
	// splitsBias reports whether the bias is split with the weight.
	splitsBias() bool
	// layer is the forward pass of a Linear of whole weight shape full
	// split this way over l.
	layer(l *Layout, full []int) nn.Split
}

// Colwise splits a Linear's output features (the rows of its [out, in]
// weight, and its bias) into equal contiguous shares. Parts > 1 says the
// output is that many fused outputs side by side (3 for attention's
// [q | k | v]), each split alike, so that a rank keeps its heads' q, k and
// v columns.
type Colwise struct {
	Parts int // 3 for a fused q|k|v projection; 0 or 1 for a plain Linear
	// Sequence says the input arrives as the rank's share of the
	// sequence: it is all-gathered whole forward, and its gradient
	// reduce-scattered back to the share (instead of all-reduced).
	Sequence bool
}

// Rowwise splits a Linear's input features (the columns of its weight);
// each rank's GEMM gives a partial sum, all-reduced, and the bias, kept
// whole, is added once after the reduction.
type Rowwise struct {
	// Sequence says the partial sums are reduce-scattered to the rank's
	// share of the sequence (instead of all-reduced), the output's
	// gradient all-gathered back whole; the bias is added on the share,
	// so its gradient is summed over the group.
	Sequence bool
}

// Plan maps module paths to how the modules they name are split. A
// pattern is a dotted path whose segments may hold path.Match's wildcards
// ("blocks.*.qkv": * stands for one segment, "0", "1", ...).
type Plan map[string]Style

// named is a module under its dotted path.
type named struct {
	path string
	mod  nn.Module
}

// slashed is a dotted path with slashes, path.Match's separator.
func slashed(dotted string) string { return strings.ReplaceAll(dotted, ".", "/") }

// Linear is one split Linear of a Layout.
type Linear struct {
	Path   string // "blocks.0.qkv"
	Style  linearStyle
	Linear *nn.Linear
	// Full is the shape of the whole weight, [out, in].
	Full []int
}

// Layout is a model split over one tensor-parallel group: the Linears the
// plan named, each holding this rank's share, the modules that run on the
// rank's share of the sequence, and the group its collectives run on.
type Layout struct {
	Group    comm.Communicator
	Linears  []Linear         // in the model's order
	Sequence []SequenceModule // in the model's order; empty without sequence parallelism
	// sequence is Sequence by module, for the Scoper.
	sequence map[nn.Module]SequenceModule
	// ctx is the running pass's context (see Guard), the collectives'.
	ctx context.Context
}

// Parallelize splits m's Linears as plan says across group, this rank
// keeping share group.Rank() of group.Size(): every rank of the group
// must call it on the same (whole, or meta) model and then train on the
// same data. A pattern that names no module, or a module that is not a
// plain Linear, or a size the group does not divide, is an error, and m
// is left as it was.
func Parallelize(m nn.Module, group comm.Communicator, plan Plan) (*Layout, error) {
	styles := map[nn.Module]Style{}
	patterns := make([]string, 0, len(plan))
	for p := range plan {
		patterns = append(patterns, p)
	}
	slices.Sort(patterns)
	var all []named
	nn.Walk(m, func(path string, mod nn.Module) {
		if reflect.TypeOf(mod).Comparable() { // containers (nn.List) split nothing themselves
			all = append(all, named{path, mod})
		}
	})
	for _, p := range patterns {
		var matched []nn.Module
		for _, n := range all {
			if ok, err := pathpkg.Match(slashed(p), slashed(n.path)); err != nil {
				return nil, fmt.Errorf("parallel: plan %q: %w", p, err)
			} else if ok {
				matched = append(matched, n.mod)
			}
		}
		if len(matched) == 0 {
			return nil, fmt.Errorf("parallel: plan %q matches no module", p)
		}
		for _, mod := range matched {
			if s, ok := styles[mod]; ok && s.String() != plan[p].String() {
				return nil, fmt.Errorf("parallel: plan: %q makes a %s-parallel module %s-parallel", p, s, plan[p])
			}
			styles[mod] = plan[p]
		}
	}
	l := &Layout{Group: group, sequence: map[nn.Module]SequenceModule{}}
	for _, n := range all {
		s, ok := styles[n.mod]
		if !ok {
			continue
		}
		if err := s.place(n.path, n.mod); err != nil {
			return nil, fmt.Errorf("parallel: %w", err)
		}
		ls, splits := s.(linearStyle)
		if !splits {
			sm := SequenceModule{Path: n.path, Style: s, Module: n.mod}
			l.Sequence, l.sequence[n.mod] = append(l.Sequence, sm), sm
			continue
		}
		lin := n.mod.(*nn.Linear)
		full := slices.Clone(lin.Weight.Value.Shape())
		if err := ls.check(full[0], full[1], group.Size()); err != nil {
			return nil, fmt.Errorf("parallel: %s %v: %w", n.path, full, err)
		}
		l.Linears = append(l.Linears, Linear{Path: n.path, Style: ls, Linear: lin, Full: full})
	}
	for _, n := range all {
		c, ok := n.mod.(nn.SplitChecker)
		if !ok {
			continue
		}
		for _, child := range n.mod.Children() {
			if _, split := styles[child.Module]; split && reflect.TypeOf(child.Module).Comparable() {
				if err := c.CheckSplit(group.Size()); err != nil {
					return nil, fmt.Errorf("parallel: %s: %w", n.path, err)
				}
				break
			}
		}
	}
	for _, s := range l.Linears {
		for _, v := range s.split() {
			old := v.Value
			v.Value, v.Grad = s.Style.share(old, group.Rank(), group.Size()), nil
			tensor.Drop(old) // as a cast drops it: no later step asks for its size
		}
		s.Linear.Split = s.Style.layer(l, s.Full)
	}
	return l, nil
}

// split lists the parameters of s that are split: its weight and, if the
// style splits it, its bias.
func (s Linear) split() []*autograd.Var {
	vs := []*autograd.Var{s.Linear.Weight}
	if s.Linear.Bias != nil && s.Style.splitsBias() {
		vs = append(vs, s.Linear.Bias)
	}
	return vs
}

func (c Colwise) String() string { return "column" }
func (Rowwise) String() string   { return "row" }

func (Colwise) place(path string, mod nn.Module) error { return placeLinear(path, mod) }
func (Rowwise) place(path string, mod nn.Module) error { return placeLinear(path, mod) }

// placeLinear reports whether mod, at path, is a Linear that can split.
func placeLinear(path string, mod nn.Module) error {
	lin, ok := mod.(*nn.Linear)
	switch {
	case !ok:
		return fmt.Errorf("plan names %s, a %s; only Linears split", path, nn.Kind(mod))
	case lin.GEMM != nil || lin.Split != nil:
		return fmt.Errorf("%s: split a Linear before precision replaces its arithmetic, and only once", path)
	}
	return nil
}

func (c Colwise) parts() int { return max(c.Parts, 1) }

func (c Colwise) check(out, _, n int) error {
	if out%(c.parts()*n) != 0 {
		return fmt.Errorf("%d output features in %d fused parts do not split evenly over %d ranks", out, c.parts(), n)
	}
	return nil
}

func (Rowwise) check(_, in, n int) error {
	if in%n != 0 {
		return fmt.Errorf("%d input features do not split evenly over %d ranks", in, n)
	}
	return nil
}

// share keeps rows [r·k, (r+1)·k) of each of the Parts blocks of t's
// first axis, k = out/(Parts·n): viewed as [Parts, n, k, rest...], the
// rank's slice of the second axis.
func (c Colwise) share(t *tensor.Tensor, r, n int) *tensor.Tensor {
	shape := t.Shape()
	out, rest := shape[0], shape[1:]
	own := append([]int{out / n}, rest...)
	if t.IsMeta() {
		return tensor.Meta(t.DType(), own...)
	}
	grouped := t.Reshape(append([]int{c.parts(), n, out / (c.parts() * n)}, rest...)...)
	byRank := tensor.Permute(grouped, swapFirst(len(rest)+3)...) // [n, Parts, k, rest...]
	tensor.FreeView(grouped)
	one := tensor.SliceRows(byRank, r, 1) // [1, Parts, k, rest...]
	tensor.Free(byRank)
	return owned(one, own)
}

// whole undoes share: [n, Parts·k, rest...] back to [Parts·n·k, rest...].
func (c Colwise) whole(stacked *tensor.Tensor) *tensor.Tensor {
	shape := stacked.Shape()
	n, k, rest := shape[0], shape[1]/c.parts(), shape[2:]
	grouped := stacked.Reshape(append([]int{n, c.parts(), k}, rest...)...)
	byPart := tensor.Permute(grouped, swapFirst(len(rest)+3)...) // [Parts, n, k, rest...]
	tensor.FreeView(grouped)
	return owned(byPart, append([]int{n * c.parts() * k}, rest...))
}

// runs: the share's rows of each part are the part's rows r·k on.
func (c Colwise) runs(full []int, r, n int) []Run {
	inner := tensor.Numel(full[1:])
	k := full[0] / (c.parts() * n)
	out := make([]Run, c.parts())
	for q := range out {
		out[q] = Run{At: q * k * inner, Whole: (q*n*k + r*k) * inner}
	}
	return out
}

// runs: share row o is columns r·k on of the weight's row o.
func (Rowwise) runs(full []int, r, n int) []Run {
	in := full[1]
	k := in / n
	out := make([]Run, full[0])
	for o := range out {
		out[o] = Run{At: o * k, Whole: o*in + r*k}
	}
	return out
}

// share keeps input columns [r·in/n, (r+1)·in/n) of the [out, in] weight.
func (Rowwise) share(t *tensor.Tensor, r, n int) *tensor.Tensor {
	k := t.Dim(-1) / n
	return tensor.Narrow(t, r*k, k)
}

// whole undoes share: [n, out, k] back to [out, n·k].
func (Rowwise) whole(stacked *tensor.Tensor) *tensor.Tensor {
	n, out, k := stacked.Dim(0), stacked.Dim(1), stacked.Dim(2)
	return owned(tensor.Permute(stacked, 1, 0, 2), []int{out, n * k})
}

// owned is t's values in a tensor of the given shape that owns its
// storage, as a parameter must (a strategy frees or replaces it); t is
// freed.
func owned(t *tensor.Tensor, shape []int) *tensor.Tensor {
	v := t.Reshape(shape...)
	out := v.Clone()
	tensor.FreeView(v)
	tensor.Free(t)
	return out
}

func (Colwise) splitsBias() bool { return true }
func (Rowwise) splitsBias() bool { return false }

// swapFirst is the permutation of rank axes that swaps the first two.
func swapFirst(rank int) []int {
	perm := make([]int, rank)
	for i := range perm {
		perm[i] = i
	}
	perm[0], perm[1] = 1, 0
	return perm
}
