package comm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/local"
	"github.com/weftml/weft/dtype"
)

func f32(vals ...float32) []byte {
	b := make([]byte, 4*len(vals))
	dtype.Encode(dtype.F32, b, vals, false)
	return b
}

func TestReduce(t *testing.T) {
	for _, tc := range []struct {
		name string
		dt   dtype.DType
		op   comm.Op
		srcs [][]byte
		want []byte
	}{
		{"float32 sums in rank order", dtype.F32, comm.Sum,
			[][]byte{f32(1, 1e8), f32(1e-8, -1e8), f32(3, 1)}, f32(4, 1)},
		{"min", dtype.F32, comm.Min,
			[][]byte{f32(1, -3), f32(2, 5)}, f32(1, -3)},
		{"int8 wraps", dtype.I8, comm.Sum,
			[][]byte{{100, 0xff}, {100, 0xff}}, []byte{200, 0xfe}},
		{"int32 max is signed", dtype.I32, comm.Max,
			[][]byte{{0xff, 0xff, 0xff, 0xff}, {1, 0, 0, 0}}, []byte{1, 0, 0, 0}},
		{"bf16 accumulates in float32, rounds once", dtype.BF16, comm.Sum,
			// 256 + 1 + 1: each partial sum rounds back to 256 in bf16, not in float32.
			[][]byte{{0x80, 0x43}, {0x80, 0x3f}, {0x80, 0x3f}}, []byte{0x81, 0x43}},
		{"e4m3fn overflows to NaN, not max", dtype.E4M3FN, comm.Sum,
			[][]byte{{0x7e}, {0x7e}}, []byte{0x7f}},
		{"e2m1 packs two per byte", dtype.E2M1, comm.Sum,
			[][]byte{{0x21}, {0x12}}, []byte{0x33}}, // 0.5+1, 1+0.5 = 1.5 (code 3) each
		{"one source is copied", dtype.E4M3FN, comm.Sum,
			[][]byte{{0x7f, 0x01}}, []byte{0x7f, 0x01}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := make([]byte, len(tc.want))
			if err := comm.Reduce(tc.dt, tc.op, dst, tc.srcs...); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst, tc.want) {
				t.Errorf("got %x, want %x", dst, tc.want)
			}
		})
	}
}

func TestReducePropagatesNaN(t *testing.T) {
	for _, op := range []comm.Op{comm.Sum, comm.Max, comm.Min} {
		dst := make([]byte, 8)
		if err := comm.Reduce(dtype.F32, op, dst, f32(1, float32(math.NaN())), f32(2, 5)); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, 2)
		dtype.Decode(dtype.F32, got, dst)
		if !math.IsNaN(float64(got[1])) {
			t.Errorf("%v(NaN, 5) = %v", op, got[1])
		}
	}
}

func TestReduceIntoSource(t *testing.T) {
	vals := make([]float32, 1500) // crosses Reduce's staging blocks
	for i := range vals {
		vals[i] = float32(i)
	}
	a, b := f32(vals...), f32(vals...)
	want := make([]byte, len(a))
	if err := comm.Reduce(dtype.F32, comm.Sum, want, a, b); err != nil {
		t.Fatal(err)
	}
	if err := comm.Reduce(dtype.F32, comm.Sum, b, a, b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Error("reducing into a source changed the result")
	}
}

func TestReduceErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"ragged", comm.Reduce(dtype.F32, comm.Sum, make([]byte, 4), make([]byte, 8)), "source 0 has 8 bytes"},
		{"partial element", comm.Reduce(dtype.F64, comm.Sum, make([]byte, 4), make([]byte, 4)), "not a whole number"},
		{"no sources", comm.Reduce(dtype.F32, comm.Sum, make([]byte, 4)), "no sources"},
		{"bad op", comm.Reduce(dtype.F32, 9, nil, nil), "unknown reduction Op(9)"},
		{"bad dtype", comm.Reduce(dtype.Invalid, comm.Sum, nil, nil), "cannot reduce invalid"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, tc.err, tc.want)
		}
	}
}

func TestRegistry(t *testing.T) {
	comm.Register("test-a", func(int, time.Duration) ([]comm.Communicator, error) { return nil, nil })
	_, err := comm.Open("nope", 1, 0)
	if err == nil || !strings.Contains(err.Error(), `unknown backend "nope" (registered: `) ||
		!strings.Contains(err.Error(), "test-a") {
		t.Errorf("Open(nope) = %v, want an error listing the backends", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("registering test-a twice did not panic")
		}
	}()
	comm.Register("test-a", func(int, time.Duration) ([]comm.Communicator, error) { return nil, nil })
}

func TestPeerError(t *testing.T) {
	for _, tc := range []struct {
		ranks []int
		want  string
	}{
		{nil, "a peer left"},
		{[]int{3}, "rank 3 left"},
		{[]int{1, 2}, "ranks 1, 2 left"},
	} {
		if got := (&comm.PeerError{Ranks: tc.ranks, Reason: "left"}).Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestMeshRefusesSizesThatDoNotDivide(t *testing.T) {
	err := comm.Each(local.NewGroup(4, local.Options{}), func(_ int, c comm.Communicator) error {
		_, err := comm.NewMesh(context.Background(), c, 3)
		if want := "comm: mesh: tensor-parallel size 3 does not divide 4 ranks (accepted: 1, 2, 4)"; err == nil || err.Error() != want {
			return fmt.Errorf("got %v, want %q", err, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestHybridGroups checks that 6 ranks with shard size 3 form shard
// groups {0,1,2} {3,4,5} and replica groups {0,3} {1,4} {2,5}, each
// ranked by position, and that a size that does not divide is refused.
func TestHybridGroups(t *testing.T) {
	err := comm.Each(local.NewGroup(6, local.Options{}), func(r int, c comm.Communicator) error {
		ctx := context.Background()
		if _, err := comm.NewHybrid(ctx, c, 4); err == nil || err.Error() != "comm: hybrid: shard size 4 does not divide 6 ranks (accepted: 1, 2, 3, 6)" {
			return fmt.Errorf("shard size 4 of 6: got %v", err)
		}
		h, err := comm.NewHybrid(ctx, c, 3)
		if err != nil {
			return err
		}
		defer h.Close()
		if h.Shard.Size() != 3 || h.Shard.Rank() != r%3 || h.Replica.Size() != 2 || h.Replica.Rank() != r/3 {
			return fmt.Errorf("rank %d: shard %d of %d, replica %d of %d", r, h.Shard.Rank(), h.Shard.Size(), h.Replica.Rank(), h.Replica.Size())
		}
		// Sums of the world ranks: over the shard group, then the replica group.
		shard := f32(float32(r))
		if err := h.Shard.AllReduce(ctx, shard, dtype.F32, comm.Sum); err != nil {
			return err
		}
		replica := f32(float32(r))
		if err := h.Replica.AllReduce(ctx, replica, dtype.F32, comm.Sum); err != nil {
			return err
		}
		wantShard, wantReplica := f32(float32(r/3*9+3)), f32(float32(2*(r%3)+3))
		if !bytes.Equal(shard, wantShard) || !bytes.Equal(replica, wantReplica) {
			return fmt.Errorf("rank %d: shard sum %x (want %x), replica sum %x (want %x)", r, shard, wantShard, replica, wantReplica)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// placed is a Transport over a Communicator whose ranks run on the given
// hosts (a comm.Placer).
type placed struct {
	comm.Communicator
	hosts []string
}

func (p placed) Hosts() []string { return p.hosts }

func (p placed) Split(context.Context, int, int) (comm.Transport, error) {
	return nil, errors.New("placed: no split")
}

// TestStatsSplitByHost: on 4 ranks of which 2 share each host, a rank
// sends each collective's per-peer part once inside its host and twice
// between hosts.
func TestStatsSplitByHost(t *testing.T) {
	err := comm.Each(local.NewGroup(4, local.Options{}), func(r int, c comm.Communicator) error {
		p := comm.New(placed{c, []string{"a", "a", "b", "b"}})
		ctx := context.Background()
		if err := p.AllGather(ctx, make([]byte, 8), make([]byte, 32)); err != nil { // 8 to each peer
			return err
		}
		if err := p.ReduceScatter(ctx, make([]byte, 16), make([]byte, 4), dtype.F32, comm.Sum); err != nil { // 4
			return err
		}
		if err := p.AllReduce(ctx, make([]byte, 16), dtype.F32, comm.Sum); err != nil { // 4 out, 4 back
			return err
		}
		if s := p.Stats(); s.InsideHost != 20 || s.BetweenHosts != 40 {
			return fmt.Errorf("rank %d: %d bytes inside its host and %d between hosts, want 20 and 40", r, s.InsideHost, s.BetweenHosts)
		}
		if s := c.Stats(); s.InsideHost != 60 || s.BetweenHosts != 0 { // a group without hosts is one host
			return fmt.Errorf("rank %d, unplaced: %d bytes inside its host and %d between hosts, want 60 and 0", r, s.InsideHost, s.BetweenHosts)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
