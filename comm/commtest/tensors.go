package commtest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// testTensors checks the collectives on tensors against the same
// references as the byte collectives, with AllGather's and
// ReduceScatter's whole tensor both stacked and concatenated.
func testTensors(t *testing.T, comms []comm.Communicator) {
	n := comms[0].Size()
	for key, dt := range []dtype.DType{dtype.F32, dtype.BF16, dtype.F64} {
		mine := func(rank int) []byte { return values(dt, 6, rank, key) }
		sum := reference(dt, comm.Sum, inputs(n, mine))
		joined := bytes.Join(inputs(n, mine), nil)
		ok := parallel(t, comms, "tensors of "+dt.String(), func(c comm.Communicator) error {
			ctx := context.Background()
			x := fromBytes(dt, mine(c.Rank()), 2, 3)
			if err := comm.AllReduceTensor(ctx, c, x, comm.Sum); err != nil {
				return err
			}
			if err := same(dt, x.Data(), sum); err != nil {
				return fmt.Errorf("allreduce: %w", err)
			}
			x = fromBytes(dt, mine(c.Rank()), 2, 3)
			for _, shape := range [][]int{{n, 2, 3}, {2 * n, 3}} {
				all := tensor.New(dt, shape...)
				if err := comm.AllGatherTensor(ctx, c, x, all); err != nil {
					return err
				}
				if err := same(dt, all.Data(), joined); err != nil {
					return fmt.Errorf("allgather into %v: %w", shape, err)
				}
				part := tensor.New(dt, 2, 3)
				if err := comm.ReduceScatterTensor(ctx, c, fromBytes(dt, bytes.Repeat(mine(c.Rank()), n), shape...), part, comm.Sum); err != nil {
					return err
				}
				if err := same(dt, part.Data(), sum); err != nil {
					return fmt.Errorf("reducescatter from %v: %w", shape, err)
				}
			}
			if err := comm.BroadcastTensor(ctx, c, x, n-1); err != nil {
				return err
			}
			return same(dt, x.Data(), mine(n-1))
		})
		if !ok {
			return
		}
	}
}

// testTensorArguments checks that a tensor collective refuses meta
// tensors, mixed dtypes and shapes that do not split into the ranks'
// parts, naming the collective and the shapes, and that the group stays
// usable.
func testTensorArguments(t *testing.T, comms []comm.Communicator) {
	n := comms[0].Size()
	parallel(t, comms, "tensor arguments", func(c comm.Communicator) error {
		ctx := context.Background()
		x := tensor.New(dtype.F32, 2, 3)
		bad := []struct {
			err  error
			want string
		}{
			{comm.AllReduceTensor(ctx, c, tensor.Meta(dtype.F32, 4), comm.Sum), "comm: allreduce: t is the meta tensor float32[4]"},
			{comm.AllReduceTensor(ctx, c, nil, comm.Sum), "comm: allreduce: t is nil"},
			{comm.BroadcastTensor(ctx, c, tensor.Meta(dtype.F32, 4), 0), "comm: broadcast: t is the meta tensor"},
			{comm.AllGatherTensor(ctx, c, x, tensor.New(dtype.BF16, n, 2, 3)), fmt.Sprintf("comm: allgather: recv is bfloat16[%d 2 3] and send float32[2 3]; they must share a dtype", n)},
			{comm.AllGatherTensor(ctx, c, x, tensor.New(dtype.F32, 3*n, 2)), fmt.Sprintf("comm: allgather: recv is float32[%d 2], want [%d 2 3]", 3*n, n)},
			{comm.AllGatherTensor(ctx, c, x, tensor.New(dtype.F32, n+1, 2, 3)), "comm: allgather: recv is float32["},
			{comm.ReduceScatterTensor(ctx, c, tensor.New(dtype.F32, 2*n+1, 3), x, comm.Sum), "comm: reducescatter: send is float32["},
			{comm.ReduceScatterTensor(ctx, c, tensor.New(dtype.F32, n, 2, 3), x, 0), "comm: reducescatter: unknown reduction"},
		}
		for i, b := range bad {
			if b.err == nil || !strings.Contains(b.err.Error(), b.want) {
				return fmt.Errorf("case %d: got %v, want an error containing %q", i, b.err, b.want)
			}
		}
		return comm.AllReduceTensor(ctx, c, x, comm.Sum)
	})
}

func fromBytes(dt dtype.DType, b []byte, shape ...int) *tensor.Tensor {
	x, err := tensor.FromBytes(dt, b, shape...)
	if err != nil {
		panic(err) // the tests' own shapes
	}
	return x
}
