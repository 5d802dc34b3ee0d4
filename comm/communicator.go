package comm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/weftml/weft/dtype"
)

// New returns a Communicator over t that checks every call's arguments,
// names the collective in its errors and counts Stats. Backends return their
// transports through New so that all of them reject the same calls and
// count the same bytes.
func New(t Transport) Communicator {
	c := &communicator{t: t, stats: Stats{Calls: map[Collective]int64{}, Bytes: map[Key]int64{}}}
	c.near = t.Size() - 1
	if p, ok := t.(Placer); ok {
		hosts := p.Hosts()
		c.near = -1 // this rank itself
		for _, h := range hosts {
			if h == hosts[t.Rank()] {
				c.near++
			}
		}
	}
	return c
}

type communicator struct {
	t      Transport
	near   int // peers on this rank's host; the rest are on others
	closed atomic.Bool
	mu     sync.Mutex // guards stats
	stats  Stats
}

func (c *communicator) Rank() int { return c.t.Rank() }
func (c *communicator) Size() int { return c.t.Size() }

func (c *communicator) AllReduce(ctx context.Context, buf []byte, dt dtype.DType, op Op) error {
	return c.do(AllReduce, dt, len(buf), checkReduce(dt, op, len(buf)), func() error {
		return c.t.AllReduce(ctx, buf, dt, op)
	})
}

func (c *communicator) AllGather(ctx context.Context, send, recv []byte) error {
	return c.do(AllGather, dtype.Invalid, len(send), checkBlocks("recv", recv, send, c.Size()), func() error {
		return c.t.AllGather(ctx, send, recv)
	})
}

func (c *communicator) ReduceScatter(ctx context.Context, send, recv []byte, dt dtype.DType, op Op) error {
	err := checkBlocks("send", send, recv, c.Size())
	if err == nil {
		err = checkReduce(dt, op, len(recv))
	}
	return c.do(ReduceScatter, dt, len(send), err, func() error {
		return c.t.ReduceScatter(ctx, send, recv, dt, op)
	})
}

func (c *communicator) Broadcast(ctx context.Context, buf []byte, root int) error {
	var err error
	if root < 0 || root >= c.Size() {
		err = fmt.Errorf("root %d outside [0, %d)", root, c.Size())
	}
	sent := 0
	if root == c.Rank() {
		sent = len(buf)
	}
	return c.do(Broadcast, dtype.Invalid, sent, err, func() error {
		return c.t.Broadcast(ctx, buf, root)
	})
}

func (c *communicator) Barrier(ctx context.Context) error {
	return c.do(Barrier, dtype.Invalid, 0, nil, func() error { return c.t.Barrier(ctx) })
}

func (c *communicator) Split(ctx context.Context, color, key int) (Communicator, error) {
	var err error
	switch {
	case color < 0 || color > math.MaxInt32:
		err = fmt.Errorf("color %d outside [0, 2³¹)", color)
	case key < math.MinInt32 || key > math.MaxInt32:
		err = fmt.Errorf("key %d outside the range of a 32-bit int", key)
	}
	var sub Transport
	if err := c.do(Split, dtype.Invalid, 0, err, func() (err error) {
		sub, err = c.t.Split(ctx, color, key)
		return err
	}); err != nil {
		return nil, err
	}
	return New(sub), nil
}

// do runs call unless the arguments were bad (err) or c is closed, and
// counts it if it succeeds.
func (c *communicator) do(coll Collective, dt dtype.DType, sent int, err error, call func() error) error {
	if err == nil && c.closed.Load() {
		err = ErrClosed
	}
	if err == nil {
		err = call()
	}
	if err != nil {
		return fmt.Errorf("comm: %s: %w", coll, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.Calls[coll]++
	if sent > 0 && c.Size() > 1 {
		c.stats.Bytes[Key{coll, dt}] += int64(sent)
		each := toEachPeer(coll, int64(sent), c.Size())
		c.stats.InsideHost += each * int64(c.near)
		c.stats.BetweenHosts += each * int64(c.Size()-1-c.near)
	}
	return nil
}

// toEachPeer is what a direct exchange of a collective with payload sent
// over n ranks sends every peer (see Stats).
func toEachPeer(coll Collective, sent int64, n int) int64 {
	switch coll {
	case AllReduce:
		return 2 * sent / int64(n)
	case ReduceScatter:
		return sent / int64(n)
	}
	return sent
}

func (c *communicator) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats.clone()
}

func (c *communicator) Close() error {
	if c.closed.Swap(true) {
		return fmt.Errorf("comm: close: %w", ErrClosed)
	}
	if err := c.t.Close(); err != nil {
		return fmt.Errorf("comm: close: %w", err)
	}
	return nil
}

// Unit returns the bytes of dt's smallest whole group of elements: its
// element size, or 1 for E2M1, which packs two elements per byte.
// Collectives split typed buffers only at multiples of Unit.
func Unit(dt dtype.DType) int { return max(1, dt.Bits()/8) }

// checkReduce reports whether op can reduce n bytes of dt.
func checkReduce(dt dtype.DType, op Op, n int) error {
	switch {
	case !op.valid():
		return fmt.Errorf("unknown reduction %v", op)
	case dt.Bits() == 0:
		return fmt.Errorf("cannot reduce %v", dt)
	case n%Unit(dt) != 0:
		return fmt.Errorf("%d bytes is not a whole number of %v elements", n, dt)
	}
	return nil
}

// checkBlocks reports whether whole holds size blocks of len(block) bytes
// and does not overlap block.
func checkBlocks(name string, whole, block []byte, size int) error {
	if len(whole) != size*len(block) {
		return fmt.Errorf("%s has %d bytes, want %d ranks × %d", name, len(whole), size, len(block))
	}
	if overlap(whole, block) {
		return errors.New("send and recv overlap")
	}
	return nil
}

func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}
