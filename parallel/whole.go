package parallel

import (
	"context"
	"fmt"
	"slices"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/tensor"
)

// Whole gathers the full value of every split parameter from the group's
// shares, keyed by the parameter: what a one-device model would hold
// (for a checkpoint, or to compare). Every rank of the group must call
// it; the shares stay as they are. Free the values when done.
func (l *Layout) Whole(ctx context.Context) (map[*autograd.Var]*tensor.Tensor, error) {
	out := map[*autograd.Var]*tensor.Tensor{}
	for _, s := range l.Linears {
		for _, v := range s.split() {
			share := v.Value
			stacked := tensor.New(share.DType(), append([]int{l.Group.Size()}, share.Shape()...)...)
			if err := comm.AllGatherTensor(ctx, l.Group, share, stacked); err != nil {
				tensor.Free(stacked)
				return nil, fmt.Errorf("tensor parallel: gathering %s: %w", s.Path, err)
			}
			out[v] = s.Style.whole(stacked)
			tensor.Free(stacked)
		}
	}
	return out, nil
}

// Load replaces this rank's share of every split parameter with its share
// of the full value get returns for it (a checkpoint's, saved whole from
// any mesh), converted to the share's dtype.
func (l *Layout) Load(get func(v *autograd.Var) (*tensor.Tensor, error)) error {
	for _, s := range l.Linears {
		for _, v := range s.split() {
			full, err := get(v)
			if err != nil {
				return err
			}
			want := s.Full
			if v != s.Linear.Weight {
				want = s.Full[:1] // a split bias
			}
			if !slices.Equal(full.Shape(), want) {
				return fmt.Errorf("tensor parallel: %s: a whole value of %v, want %v", s.Path, full.Shape(), want)
			}
			share := s.Style.share(full, l.Group.Rank(), l.Group.Size())
			v.Value.CopyFrom(share)
			tensor.Free(share)
		}
	}
	return nil
}
