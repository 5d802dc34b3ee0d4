package parallel

import (
	"context"
	"fmt"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// column is a column-parallel Linear's pass: f, then the rank's GEMM
// with its share of the bias. Its shares begin every stride output
// features.
type column struct {
	l      *Layout
	stride int
}

func (c column) Forward(tp *autograd.Tape, x, bias *autograd.Var, local func(x, bias *autograd.Var) *autograd.Var) *autograd.Var {
	return local(c.l.copyIn(tp, x), bias) // (..., out/n)
}

// row is a row-parallel Linear's pass: the rank's GEMM without bias,
// g, then the whole bias, once. Its shares begin every stride input
// features.
type row struct {
	l      *Layout
	stride int
}

func (r row) Forward(tp *autograd.Tape, x, bias *autograd.Var, local func(x, bias *autograd.Var) *autograd.Var) *autograd.Var {
	y := r.l.reduceOut(tp, local(x, nil)) // (..., out)
	if bias == nil {
		return y
	}
	// In the dtype of y, as the GEMM would have added it (autocast casts
	// a Linear's bias with its weight).
	return tp.AddBroadcast(y, tp.Cast(bias, y.Value.DType()), len(y.Value.Shape())-1)
}

func (c Colwise) layer(l *Layout, full []int) nn.Split {
	return column{l, full[0] / (c.parts() * l.Group.Size())}
}
func (Rowwise) layer(l *Layout, full []int) nn.Split { return row{l, full[1] / l.Group.Size()} }

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

// copyIn is Megatron's f: x as it is, its gradient all-reduced over the
// group (each rank's GEMM gives the part of it that its columns reach).
func (l *Layout) copyIn(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	same := x.Value.Reshape(x.Value.Shape()...) // a view: the tape must not free x's storage with it
	return tp.Record(same, func(dy *tensor.Tensor) []*tensor.Tensor {
		l.allReduce(dy, "the input gradient of a column-parallel Linear")
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
	return tp.Record(sum, func(dy *tensor.Tensor) []*tensor.Tensor { return []*tensor.Tensor{dy} }, y)
}

// failure carries a collective's error out of a pass, which has no error
// to return, to Guard.
type failure struct{ err error }

func (l *Layout) allReduce(t *tensor.Tensor, what string) {
	if t.IsMeta() {
		return
	}
	ctx := l.ctx
	if ctx == nil { // a pass outside Guard
		ctx = context.Background()
	}
	if err := comm.AllReduceTensor(ctx, l.Group, t, comm.Sum); err != nil {
		panic(failure{fmt.Errorf("tensor parallel: all-reducing %s: %w", what, err)})
	}
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
