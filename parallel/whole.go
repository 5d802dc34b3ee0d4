package parallel

import (
	"context"
	"fmt"
	"slices"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/tensor"
)

// splitOf returns the split Linear v is a split parameter of.
func (l *Layout) splitOf(v *autograd.Var) (Linear, bool) {
	for _, s := range l.Linears {
		if slices.Contains(s.split(), v) {
			return s, true
		}
	}
	return Linear{}, false
}

// Splits reports whether the parameter at path (its dotted path in the
// model, "blocks.0.qkv.weight") is split.
func (l *Layout) Splits(path string) bool {
	for _, s := range l.Linears {
		if path == s.Path+".weight" || s.Style.splitsBias() && path == s.Path+".bias" {
			return true
		}
	}
	return false
}

// WholeShape is the shape one device holds of parameter v: v's own
// unless v is split.
func (l *Layout) WholeShape(v *autograd.Var) []int {
	s, ok := l.splitOf(v)
	switch {
	case !ok:
		return v.Value.Shape()
	case v == s.Linear.Weight:
		return s.Full
	}
	return s.Full[:1] // a split bias
}

// Run is a stretch of a share's elements (in row-major order) that lie
// side by side in the whole tensor: share element At is whole element
// Whole, and so on up to the next run's At.
type Run struct{ At, Whole int }

// Runs places this rank's share of parameter v in the whole: its
// elements in runs, sorted, the first at 0; nil if v is not split.
func (l *Layout) Runs(v *autograd.Var) []Run {
	s, ok := l.splitOf(v)
	if !ok {
		return nil
	}
	return s.Style.runs(l.WholeShape(v), l.Group.Rank(), l.Group.Size())
}

// Gather returns the whole of t, a tensor shaped like this rank's share
// of parameter v (its value, gradient or an optimizer moment), from every
// rank's share of it; t itself if v is not split. Every rank of the group
// must call it for the same v; free the result when done.
func (l *Layout) Gather(ctx context.Context, v *autograd.Var, t *tensor.Tensor) (*tensor.Tensor, error) {
	s, ok := l.splitOf(v)
	if !ok {
		return t, nil
	}
	stacked := tensor.New(t.DType(), append([]int{l.Group.Size()}, t.Shape()...)...)
	defer tensor.Free(stacked)
	if err := comm.AllGatherTensor(ctx, l.Group, t, stacked); err != nil {
		return nil, fmt.Errorf("tensor parallel: gathering %s: %w", s.Path, err)
	}
	return s.Style.whole(stacked), nil
}

// Share returns this rank's share of whole, a tensor of the shape one
// device holds of parameter v (a checkpoint's, saved from any mesh);
// whole itself if v is not split.
func (l *Layout) Share(v *autograd.Var, whole *tensor.Tensor) (*tensor.Tensor, error) {
	s, ok := l.splitOf(v)
	if !ok {
		return whole, nil
	}
	if want := l.WholeShape(v); !slices.Equal(whole.Shape(), want) {
		return nil, fmt.Errorf("tensor parallel: %s: a whole value of %v, want %v", s.Path, whole.Shape(), want)
	}
	return s.Style.share(whole, l.Group.Rank(), l.Group.Size()), nil
}

// Whole gathers the whole value of every split parameter, keyed by the
// parameter: what one device would hold. Every rank of the group must
// call it; the shares stay as they are. Free the values when done.
func (l *Layout) Whole(ctx context.Context) (map[*autograd.Var]*tensor.Tensor, error) {
	out := map[*autograd.Var]*tensor.Tensor{}
	for _, s := range l.Linears {
		for _, v := range s.split() {
			w, err := l.Gather(ctx, v, v.Value)
			if err != nil {
				return nil, err
			}
			out[v] = w
		}
	}
	return out, nil
}

// Stack returns every rank's t, all of one shape, along a new first axis
// in rank order: state a rank keeps of its share of its own, which has no
// whole (low-bit optimizer moments, whose blocks are the share's). Every
// rank of the group must call it; free the result when done.
func (l *Layout) Stack(ctx context.Context, t *tensor.Tensor) (*tensor.Tensor, error) {
	stacked := tensor.New(t.DType(), append([]int{l.Group.Size()}, t.Shape()...)...)
	if err := comm.AllGatherTensor(ctx, l.Group, t, stacked); err != nil {
		tensor.Free(stacked)
		return nil, fmt.Errorf("tensor parallel: stacking: %w", err)
	}
	return stacked, nil
}

// Unstack returns this rank's tensor of stacked, Stack's result.
func (l *Layout) Unstack(stacked *tensor.Tensor) *tensor.Tensor {
	own := tensor.SliceRows(stacked, l.Group.Rank(), 1)
	own.SetShape(stacked.Shape()[1:]...)
	return own
}
