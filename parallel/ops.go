package parallel

import (
	"context"
	"fmt"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// column is a column-parallel Linear's pass: f (or, with sequence
// parallelism, the all-gather of the sequence), then the rank's GEMM with
// its share of the bias. Its shares begin every stride output features.
type column struct {
	l        *Layout
	stride   int
	sequence bool
}

func (c column) Forward(tp *autograd.Tape, x, bias *autograd.Var, local func(x, bias *autograd.Var) *autograd.Var) *autograd.Var {
	if c.sequence {
		return local(c.l.gatherIn(tp, x), bias) // (B, T, out/n) from (B, T/n, in)
	}
	return local(c.l.copyIn(tp, x, "the input gradient of a column-parallel Linear"), bias) // (..., out/n)
}

// row is a row-parallel Linear's pass: the rank's GEMM without bias,
// g (or, with sequence parallelism, the reduce-scatter along the
// sequence), then the whole bias, once. Its shares begin every stride
// input features.
type row struct {
	l        *Layout
	stride   int
	sequence bool
}

func (r row) Forward(tp *autograd.Tape, x, bias *autograd.Var, local func(x, bias *autograd.Var) *autograd.Var) *autograd.Var {
	var y *autograd.Var
	if r.sequence {
		y = r.l.scatterOut(tp, local(x, nil)) // (B, T/n, out)
		if bias != nil {
			bias = r.l.copyIn(tp, bias, "the gradient of a row-parallel bias") // added on the share: each rank has part of its gradient
		}
	} else {
		y = r.l.reduceOut(tp, local(x, nil)) // (..., out)
	}
	if bias == nil {
		return y
	}
	// In the dtype of y, as the GEMM would have added it (autocast casts
	// a Linear's bias with its weight).
	return tp.AddBroadcast(y, tp.Cast(bias, y.Value.DType()), len(y.Value.Shape())-1)
}

func (c Colwise) layer(l *Layout, full []int) nn.Split {
	return column{l, full[0] / (c.parts() * l.Group.Size()), c.Sequence}
}
func (r Rowwise) layer(l *Layout, full []int) nn.Split {
	return row{l, full[1] / l.Group.Size(), r.Sequence}
}

var (
	_ nn.ShardedSplit = column{}
	_ nn.ShardedSplit = row{}
)

func (c column) ShareStride(axis int) int { return strideOn(axis, 0, c.stride) }
func (r row) ShareStride(axis int) int    { return strideOn(axis, 1, r.stride) }

// strideOn is stride on the axis a split cuts, 0 on the other.
func strideOn(axis, cut, stride int) int {
	if axis != cut {
		return 0
	}
	return stride
}

// copyIn is Megatron's f: x as it is, its gradient (what names it, for
// errors) all-reduced over the group. Before a column-parallel Linear each
// rank's GEMM gives the part of x's gradient that its columns reach; a
// parameter used on a share of the sequence gets part of its gradient on
// each rank.
func (l *Layout) copyIn(tp *autograd.Tape, x *autograd.Var, what string) *autograd.Var {
	same := x.Value.Reshape(x.Value.Shape()...) // a view: the tape must not free x's storage with it
	return tp.RecordUnsaved(same, func(dy *tensor.Tensor) []*tensor.Tensor {
		l.allReduce(dy, what)
		return []*tensor.Tensor{dy}
	}, x)
}

// reduceOut is Megatron's g: the sum over the group of the ranks' partial
// outputs; its gradient passes unchanged (each rank's share of the GEMM
// needs all of it).
func (l *Layout) reduceOut(tp *autograd.Tape, y *autograd.Var) *autograd.Var {
	var sum *tensor.Tensor
	if y.Value.IsMeta() { // a plan's pass on shapes
		sum = tensor.Meta(y.Value.DType(), y.Value.Shape()...)
	} else {
		sum = y.Value.Clone()
	}
	l.allReduce(sum, "the partial outputs of a row-parallel Linear")
	return tp.RecordUnsaved(sum, func(dy *tensor.Tensor) []*tensor.Tensor { return []*tensor.Tensor{dy} }, y)
}

// failure carries a collective's error out of a pass, which has no error
// to return, to Guard.
type failure struct{ err error }

func (l *Layout) allReduce(t *tensor.Tensor, what string) {
	if err := l.sum(t, what); err != nil {
		panic(failure{err})
	}
}

// sum all-reduces t over the group, in place.
func (l *Layout) sum(t *tensor.Tensor, what string) error {
	if t.IsMeta() {
		return nil
	}
	if err := comm.AllReduceTensor(l.context(), l.Group, t, comm.Sum); err != nil {
		return fmt.Errorf("tensor parallel: all-reducing %s: %w", what, err)
	}
	return nil
}

// context is the running pass's context.
func (l *Layout) context() context.Context {
	if l.ctx == nil { // a pass outside Guard
		return context.Background()
	}
	return l.ctx
}

// Guard runs fn, a forward or backward pass of the split model, with the
// collectives on ctx, and returns the error of one that failed.
func (l *Layout) Guard(ctx context.Context, fn func() error) (err error) {
	l.ctx = ctx
	defer func() {
		l.ctx = nil
		if p := recover(); p != nil {
			f, ok := p.(failure)
			if !ok {
				panic(p)
			}
			err = f.err
		}
	}()
	return fn()
}
