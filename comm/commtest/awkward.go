package commtest

import (
	"context"
	"time"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
)

// Awkward returns a Communicator that performs each call on c as up to
// three calls on pieces of uneven size (one comm.Unit, then the rest in
// two), rank r sleeping r×delay before each piece. Like testing/iotest's
// OneByteReader it is legal but unfriendly: it makes ranks arrive at
// different times with tiny buffers, and it gives code layered on a
// Communicator an implementation that splits the work differently. Its
// Stats count each call once, as the caller made it.
func Awkward(c comm.Communicator, delay time.Duration) comm.Communicator {
	return comm.New(&awkward{c: c, delay: delay * time.Duration(c.Rank())})
}

type awkward struct {
	c     comm.Communicator
	delay time.Duration
}

func (a *awkward) Rank() int    { return a.c.Rank() }
func (a *awkward) Size() int    { return a.c.Size() }
func (a *awkward) Close() error { return a.c.Close() }

func (a *awkward) AllReduce(ctx context.Context, buf []byte, dt dtype.DType, op comm.Op) error {
	return a.pieces(ctx, len(buf), comm.Unit(dt), func(lo, hi int) error {
		return a.c.AllReduce(ctx, buf[lo:hi], dt, op)
	})
}

func (a *awkward) AllGather(ctx context.Context, send, recv []byte) error {
	return a.pieces(ctx, len(send), 1, func(lo, hi int) error {
		w := hi - lo
		tmp := make([]byte, a.Size()*w)
		if err := a.c.AllGather(ctx, send[lo:hi], tmp); err != nil {
			return err
		}
		for k := range a.Size() {
			copy(recv[k*len(send)+lo:], tmp[k*w:(k+1)*w])
		}
		return nil
	})
}

func (a *awkward) ReduceScatter(ctx context.Context, send, recv []byte, dt dtype.DType, op comm.Op) error {
	return a.pieces(ctx, len(recv), comm.Unit(dt), func(lo, hi int) error {
		w := hi - lo
		tmp := make([]byte, a.Size()*w)
		for k := range a.Size() {
			copy(tmp[k*w:], send[k*len(recv)+lo:k*len(recv)+hi])
		}
		return a.c.ReduceScatter(ctx, tmp, recv[lo:hi], dt, op)
	})
}

func (a *awkward) Broadcast(ctx context.Context, buf []byte, root int) error {
	return a.pieces(ctx, len(buf), 1, func(lo, hi int) error {
		return a.c.Broadcast(ctx, buf[lo:hi], root)
	})
}

func (a *awkward) Barrier(ctx context.Context) error {
	return a.pieces(ctx, 0, 1, func(int, int) error { return a.c.Barrier(ctx) })
}

// Split splits c: the subgroup's calls are as awkward as this group's.
func (a *awkward) Split(ctx context.Context, color, key int) (comm.Transport, error) {
	if err := sleep(ctx, a.delay); err != nil {
		return nil, err
	}
	sub, err := a.c.Split(ctx, color, key)
	if err != nil {
		return nil, err
	}
	return &awkward{c: sub, delay: a.delay}, nil
}

// pieces calls f on the pieces [lo, hi) of an n-byte buffer, cut at whole
// units, after this rank's delay; an empty buffer is one empty piece.
func (a *awkward) pieces(ctx context.Context, n, unit int, f func(lo, hi int) error) error {
	units := n / unit
	bounds := []int{0}
	for _, b := range []int{1, (units + 1) / 2, units} {
		if b <= units && b > bounds[len(bounds)-1] {
			bounds = append(bounds, b)
		}
	}
	if len(bounds) == 1 {
		bounds = append(bounds, 0)
	}
	for i := 1; i < len(bounds); i++ {
		if err := sleep(ctx, a.delay); err != nil {
			return err
		}
		if err := f(bounds[i-1]*unit, bounds[i]*unit); err != nil {
			return err
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
