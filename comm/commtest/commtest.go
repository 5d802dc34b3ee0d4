// Package commtest checks that a comm.Communicator behaves as package comm
// documents. As with testing/slogtest and gonum's testblas, a backend's
// whole conformance test is one call:
//
//	func TestConformance(t *testing.T) {
//		commtest.Run(t, func(n int) []comm.Communicator {
//			return local.NewGroup(n, local.Options{Timeout: time.Second})
//		})
//	}
package commtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
)

// Run checks every collective on groups of 1 to 4 ranks made by newGroup:
// for several dtypes (FP8 and E2M1 among them), every Op, and buffers of
// odd, empty and multi-block lengths, each rank's result must equal a
// reference computed here bit for bit, so all ranks agree; Stats must count
// exactly what comm.Stats documents; bad arguments must fail without
// breaking the group; and a canceled context or a peer that never calls
// must fail a call, naming the peer, rather than hang it. The collectives
// on tensors must give the same bits and refuse shapes that do not split;
// Split's subgroups and NewMesh's rows and columns must span exactly their
// ranks, in order, each counting its own Stats. Run does all this twice: on
// the communicators as they are, and wrapped by Awkward.
//
// newGroup(n) returns the communicators that this process hosts in a new
// group of n ranks: all n for in-process ranks; for a backend with a
// process per rank, this process's one (every process then calls Run, so
// that they make the same calls in the same order). It returns nil if the
// backend cannot make n ranks. Its groups should give up on a missing peer
// after about a second: the dead-peer test waits that long.
func Run(t *testing.T, newGroup func(n int) []comm.Communicator) {
	variants := []struct {
		name string
		wrap func(comm.Communicator) comm.Communicator
	}{
		{"plain", func(c comm.Communicator) comm.Communicator { return c }},
		{"awkward", func(c comm.Communicator) comm.Communicator { return Awkward(c, 200*time.Microsecond) }},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			for n := 1; n <= 4; n++ {
				t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
					// Each test gets a new group; the first is made here to
					// see whether the backend can make one at all.
					first := newGroup(n)
					if first == nil {
						t.Skipf("backend cannot make %d ranks here", n)
					}
					for _, tc := range tests {
						t.Run(tc.name, func(t *testing.T) {
							comms := first
							if first = nil; comms == nil {
								comms = newGroup(n)
							}
							for i, c := range comms {
								comms[i] = v.wrap(c)
							}
							defer closeAll(t, comms)
							tc.f(t, comms)
						})
					}
					if first != nil { // the tests were filtered out with -run
						closeAll(t, first)
					}
				})
			}
		})
	}
}

var tests = []struct {
	name string
	f    func(*testing.T, []comm.Communicator)
}{
	{"AllReduce", testAllReduce},
	{"AllGather", testAllGather},
	{"ReduceScatter", testReduceScatter},
	{"Broadcast", testBroadcast},
	{"Barrier", testBarrier},
	{"Tensors", testTensors},
	{"TensorArguments", testTensorArguments},
	{"Split", testSplit},
	{"Mesh", testMesh},
	{"Stats", testStats},
	{"BadArguments", testBadArguments},
	{"Closed", testClosed},
	{"Canceled", testCanceled},
	{"DeadPeer", testDeadPeer},
}

func closeAll(t *testing.T, comms []comm.Communicator) {
	for _, c := range comms {
		if err := c.Close(); err != nil && !errors.Is(err, comm.ErrClosed) {
			t.Errorf("rank %d: %v", c.Rank(), err)
		}
	}
}

// hang is how long a test waits for its ranks before declaring them stuck.
const hang = 20 * time.Second

// parallel runs f for each communicator on its own goroutine, as ranks
// run, and reports each rank's error under label. It reports whether all
// succeeded.
func parallel(t *testing.T, comms []comm.Communicator, label string, f func(c comm.Communicator) error) bool {
	t.Helper()
	errs := make(chan error, len(comms))
	for _, c := range comms {
		go func() {
			if err := f(c); err != nil {
				errs <- fmt.Errorf("%s: rank %d: %w", label, c.Rank(), err)
				return
			}
			errs <- nil
		}()
	}
	timeout := time.NewTimer(hang)
	defer timeout.Stop()
	ok := true
	for range comms {
		select {
		case err := <-errs:
			if err != nil {
				t.Error(err)
				ok = false
			}
		case <-timeout.C:
			t.Fatalf("%s: ranks still running after %v", label, hang)
		}
	}
	return ok
}

// reduction is one reduction case.
type reduction struct {
	dt    dtype.DType
	op    comm.Op
	units int // buffer (AllReduce) or block (ReduceScatter) length in comm.Unit(dt)
}

func (r reduction) String() string { return fmt.Sprintf("%v %v of %d units", r.op, r.dt, r.units) }

// reductions covers every Op on every kind of arithmetic: float32 (F32,
// BF16, the 8- and 4-bit floats), float64 and integer; with lengths that
// are empty, odd, and longer than comm.Reduce's 512-element block.
var reductions = func() []reduction {
	var rs []reduction
	for _, dt := range []dtype.DType{dtype.F32, dtype.F64, dtype.BF16, dtype.E4M3FN, dtype.E2M1, dtype.I32} {
		for _, op := range []comm.Op{comm.Sum, comm.Max, comm.Min} {
			for _, units := range []int{0, 1, 7, 1031} {
				rs = append(rs, reduction{dt, op, units})
			}
		}
	}
	return rs
}()

// lengths are the byte lengths of the untyped collectives' buffers.
var lengths = []int{0, 1, 5, 4099}

func testAllReduce(t *testing.T, comms []comm.Communicator) {
	n := comms[0].Size()
	for key, r := range reductions {
		want := reference(r.dt, r.op, inputs(n, func(rank int) []byte { return values(r.dt, r.units, rank, key) }))
		ok := parallel(t, comms, "allreduce "+r.String(), func(c comm.Communicator) error {
			buf := values(r.dt, r.units, c.Rank(), key)
			if err := c.AllReduce(context.Background(), buf, r.dt, r.op); err != nil {
				return err
			}
			return same(r.dt, buf, want)
		})
		if !ok {
			return
		}
	}
}

func testReduceScatter(t *testing.T, comms []comm.Communicator) {
	n := comms[0].Size()
	for key, r := range reductions {
		sends := inputs(n, func(rank int) []byte { return values(r.dt, n*r.units, rank, key) })
		block := r.units * comm.Unit(r.dt)
		ok := parallel(t, comms, "reducescatter "+r.String(), func(c comm.Communicator) error {
			recv := make([]byte, block)
			if err := c.ReduceScatter(context.Background(), sends[c.Rank()], recv, r.dt, r.op); err != nil {
				return err
			}
			lo := c.Rank() * block
			return same(r.dt, recv, reference(r.dt, r.op, inputs(n, func(rank int) []byte { return sends[rank][lo : lo+block] })))
		})
		if !ok {
			return
		}
	}
}

func testAllGather(t *testing.T, comms []comm.Communicator) {
	n := comms[0].Size()
	for _, m := range lengths {
		want := bytes.Join(inputs(n, func(rank int) []byte { return pattern(rank, m) }), nil)
		ok := parallel(t, comms, fmt.Sprintf("allgather of %d bytes", m), func(c comm.Communicator) error {
			recv := bytes.Repeat([]byte{0xee}, n*m)
			if err := c.AllGather(context.Background(), pattern(c.Rank(), m), recv); err != nil {
				return err
			}
			return same(dtype.I8, recv, want)
		})
		if !ok {
			return
		}
	}
}

func testBroadcast(t *testing.T, comms []comm.Communicator) {
	for root := range comms[0].Size() {
		for _, m := range lengths {
			ok := parallel(t, comms, fmt.Sprintf("broadcast of %d bytes from %d", m, root), func(c comm.Communicator) error {
				buf := pattern(c.Rank(), m)
				if err := c.Broadcast(context.Background(), buf, root); err != nil {
					return err
				}
				return same(dtype.I8, buf, pattern(root, m))
			})
			if !ok {
				return
			}
		}
	}
}

// testBarrier has rank r arrive r×d late: no rank may leave before the
// last arrives.
func testBarrier(t *testing.T, comms []comm.Communicator) {
	const d = 30 * time.Millisecond
	n := comms[0].Size()
	parallel(t, comms, "barrier", func(c comm.Communicator) error {
		ctx := context.Background()
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		start := time.Now()
		time.Sleep(time.Duration(c.Rank()) * d)
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if waited, last := time.Since(start), time.Duration(n-1)*d; waited < last-d/2 {
			return fmt.Errorf("left after %v, before rank %d arrived at about %v", waited, n-1, last)
		}
		return nil
	})
}

func testStats(t *testing.T, comms []comm.Communicator) {
	n := comms[0].Size()
	parallel(t, comms, "stats", func(c comm.Communicator) error {
		ctx := context.Background()
		if c.AllReduce(ctx, make([]byte, 3), dtype.F32, comm.Sum) == nil {
			return errors.New("allreduce of 3 bytes of float32 succeeded")
		}
		for _, err := range []error{
			c.AllReduce(ctx, make([]byte, 20), dtype.BF16, comm.Sum),
			c.AllGather(ctx, make([]byte, 5), make([]byte, 5*n)),
			c.ReduceScatter(ctx, make([]byte, 12*n), make([]byte, 12), dtype.F32, comm.Max),
			c.Broadcast(ctx, make([]byte, 7), n-1),
			c.Barrier(ctx),
		} {
			if err != nil {
				return err
			}
		}
		want := comm.Stats{
			Calls: map[comm.Collective]int64{comm.AllReduce: 1, comm.AllGather: 1, comm.ReduceScatter: 1, comm.Broadcast: 1, comm.Barrier: 1},
			Bytes: map[comm.Key]int64{},
		}
		if n > 1 {
			want.Bytes[comm.Key{Collective: comm.AllReduce, DType: dtype.BF16}] = 20
			want.Bytes[comm.Key{Collective: comm.AllGather, DType: dtype.Invalid}] = 5
			want.Bytes[comm.Key{Collective: comm.ReduceScatter, DType: dtype.F32}] = int64(12 * n)
			if c.Rank() == n-1 {
				want.Bytes[comm.Key{Collective: comm.Broadcast, DType: dtype.Invalid}] = 7
			}
		}
		if got := c.Stats(); !maps.Equal(got.Calls, want.Calls) || !maps.Equal(got.Bytes, want.Bytes) {
			return fmt.Errorf("Stats() = %v, want %v", got, want)
		}
		return nil
	})
}

// testBadArguments checks that bad calls fail on each rank before any
// communication, so that they leave the group usable.
func testBadArguments(t *testing.T, comms []comm.Communicator) {
	n := comms[0].Size()
	parallel(t, comms, "bad arguments", func(c comm.Communicator) error {
		ctx := context.Background()
		recv := make([]byte, 2*n)
		bad := []struct {
			what string
			err  error
		}{
			{"allreduce of 3 bytes of float32", c.AllReduce(ctx, make([]byte, 3), dtype.F32, comm.Sum)},
			{"allreduce with Op 0", c.AllReduce(ctx, make([]byte, 4), dtype.F32, 0)},
			{"allreduce of invalid dtype", c.AllReduce(ctx, make([]byte, 4), dtype.Invalid, comm.Sum)},
			{"allgather into a short recv", c.AllGather(ctx, make([]byte, 2), make([]byte, 2*n-1))},
			{"allgather from inside recv", c.AllGather(ctx, recv[:2], recv)},
			{"reducescatter from a long send", c.ReduceScatter(ctx, make([]byte, 4*n+4), make([]byte, 4), dtype.F32, comm.Sum)},
			{"reducescatter of 6-byte float32 blocks", c.ReduceScatter(ctx, make([]byte, 6*n), make([]byte, 6), dtype.F32, comm.Sum)},
			{"broadcast from rank -1", c.Broadcast(ctx, make([]byte, 4), -1)},
			{"broadcast from rank Size()", c.Broadcast(ctx, make([]byte, 4), n)},
		}
		for _, b := range bad {
			if b.err == nil {
				return fmt.Errorf("%s succeeded", b.what)
			}
		}
		return c.AllReduce(ctx, make([]byte, 4), dtype.F32, comm.Sum)
	})
}

func testClosed(t *testing.T, comms []comm.Communicator) {
	parallel(t, comms, "closed", func(c comm.Communicator) error {
		if err := c.Close(); err != nil {
			return err
		}
		if err := c.AllReduce(context.Background(), make([]byte, 4), dtype.F32, comm.Sum); !errors.Is(err, comm.ErrClosed) {
			return fmt.Errorf("allreduce after Close: got %v, want ErrClosed", err)
		}
		if err := c.Close(); !errors.Is(err, comm.ErrClosed) {
			return fmt.Errorf("second Close: got %v, want ErrClosed", err)
		}
		return nil
	})
}

// testCanceled has every rank but the last call AllReduce with a context
// that expires: each must return the context's error, not wait for the
// backend's timeout.
func testCanceled(t *testing.T, comms []comm.Communicator) {
	n := comms[0].Size()
	if n == 1 {
		t.Skip("needs a peer")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	parallel(t, comms, "canceled", func(c comm.Communicator) error {
		if c.Rank() == n-1 {
			return nil
		}
		if err := c.AllReduce(ctx, make([]byte, 4), dtype.F32, comm.Sum); !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("got %v, want context.DeadlineExceeded", err)
		}
		return nil
	})
}

// testDeadPeer has the last rank never call: the others must fail with a
// comm.PeerError that names it.
func testDeadPeer(t *testing.T, comms []comm.Communicator) {
	n := comms[0].Size()
	if n == 1 {
		t.Skip("needs a peer")
	}
	parallel(t, comms, "dead peer", func(c comm.Communicator) error {
		if c.Rank() == n-1 {
			return nil
		}
		err := c.AllReduce(context.Background(), make([]byte, 4), dtype.F32, comm.Sum)
		var pe *comm.PeerError
		if !errors.As(err, &pe) || !slices.Equal(pe.Ranks, []int{n - 1}) {
			return fmt.Errorf("got %v, want a PeerError naming rank %d", err, n-1)
		}
		return nil
	})
}

// inputs returns f(rank) for every rank of a group of n.
func inputs(n int, f func(rank int) []byte) [][]byte {
	out := make([][]byte, n)
	for rank := range out {
		out[rank] = f(rank)
	}
	return out
}

// values returns units of dt holding pseudo-random values for rank and
// case key, of magnitudes from 1/16 to 16, so that float sums round (and
// rank order matters) yet four ranks' sum stays finite in FP8.
func values(dt dtype.DType, units, rank, key int) []byte {
	b := make([]byte, units*comm.Unit(dt))
	f := make([]float64, len(b)*8/dt.Bits())
	for i := range f {
		h := mix(uint64(rank)<<48 ^ uint64(key)<<32 ^ uint64(i))
		f[i] = float64(int(h%2001)-1000) / 1000 * float64(uint64(1)<<(h>>32%9)) / 16
	}
	dtype.EncodeF64(dt, b, f, true)
	return b
}

// pattern returns m bytes that differ between ranks.
func pattern(rank, m int) []byte {
	b := make([]byte, m)
	for i := range b {
		b[i] = byte(mix(uint64(rank)<<32 ^ uint64(i)))
	}
	return b
}

// mix is SplitMix64's finalizer: a cheap, well-spread hash.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// reference reduces ins as comm.Reduce documents, in float64 carrying
// float32's rounding where the dtype calls for it.
func reference(dt dtype.DType, op comm.Op, ins [][]byte) []byte {
	n := len(ins[0]) * 8 / dt.Bits()
	acc, x := make([]float64, n), make([]float64, n)
	dtype.DecodeF64(dt, acc, ins[0])
	for _, in := range ins[1:] {
		dtype.DecodeF64(dt, x, in)
		for i, a := range acc {
			switch {
			case op == comm.Max:
				acc[i] = max(a, x[i])
			case op == comm.Min:
				acc[i] = min(a, x[i])
			case dt == dtype.F64 || !dt.IsFloat(): // integers are exact in float64 at these magnitudes
				acc[i] = a + x[i]
			default:
				acc[i] = float64(float32(a) + float32(x[i]))
			}
		}
	}
	out := make([]byte, len(ins[0]))
	dtype.EncodeF64(dt, out, acc, false)
	return out
}

// same reports the first element where got and want differ.
func same(dt dtype.DType, got, want []byte) error {
	if len(got) != len(want) {
		return fmt.Errorf("got %d bytes, want %d", len(got), len(want))
	}
	u := comm.Unit(dt)
	for i := 0; i < len(got); i += u {
		if !bytes.Equal(got[i:i+u], want[i:i+u]) {
			return fmt.Errorf("bytes %d:%d are %x, want %x", i, i+u, got[i:i+u], want[i:i+u])
		}
	}
	return nil
}

// BenchmarkAllReduce times AllReduce of nbytes of float32 on comms, the
// ranks this process hosts, and reports algorithm bandwidth (the bytes
// each rank reduces per second) and bus bandwidth (that times 2(n-1)/n, the
// traffic a ring would move, comparable across group sizes as in
// nccl-tests), in GB/s.
func BenchmarkAllReduce(b *testing.B, comms []comm.Communicator, nbytes int) {
	bufs := inputs(len(comms), func(i int) []byte { return values(dtype.F32, nbytes/4, comms[i].Rank(), 0) })
	b.SetBytes(int64(nbytes))
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Go(func() {
			for range b.N {
				if err := c.AllReduce(context.Background(), bufs[i], dtype.F32, comm.Sum); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	n := float64(comms[0].Size())
	algbw := float64(nbytes) * float64(b.N) / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(algbw, "GB/s")
	b.ReportMetric(algbw*2*(n-1)/n, "busGB/s")
}
