package commtest

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
)

// testSplit splits the group into its even and odd ranks, each ranked in
// reverse: every subgroup's collectives must span exactly its members in
// that order and count in its own Stats, the parent must count the split
// alone and stay usable, and a negative color must fail on every rank.
func testSplit(t *testing.T, comms []comm.Communicator) {
	n := comms[0].Size()
	parallel(t, comms, "split", func(c comm.Communicator) error {
		ctx := context.Background()
		r := c.Rank()
		var members []int // the parent ranks of r's subgroup, in its rank order
		for k := n - 1; k >= 0; k-- {
			if k%2 == r%2 {
				members = append(members, k)
			}
		}
		sub, err := c.Split(ctx, r%2, -r)
		if err != nil {
			return err
		}
		if sub.Size() != len(members) || sub.Rank() != slices.Index(members, r) {
			return fmt.Errorf("subgroup rank %d of %d, want %d of %d", sub.Rank(), sub.Size(), slices.Index(members, r), len(members))
		}
		recv := make([]byte, 3*sub.Size())
		if err := sub.AllGather(ctx, pattern(r, 3), recv); err != nil {
			return err
		}
		var want [][]byte
		for _, k := range members {
			want = append(want, pattern(k, 3))
		}
		if err := same(dtype.I8, recv, bytes.Join(want, nil)); err != nil {
			return fmt.Errorf("allgather in the subgroup: %w", err)
		}
		if err := sumOfRanks(ctx, sub, r, members); err != nil {
			return err
		}
		wantStats := comm.Stats{Calls: map[comm.Collective]int64{comm.AllGather: 1, comm.AllReduce: 1}, Bytes: map[comm.Key]int64{}}
		if len(members) > 1 {
			wantStats.Bytes[comm.Key{Collective: comm.AllGather}] = 3
			wantStats.Bytes[comm.Key{Collective: comm.AllReduce, DType: dtype.F64}] = 8
		}
		if err := sameStats(sub.Stats(), wantStats); err != nil {
			return fmt.Errorf("the subgroup's %w", err)
		}
		if err := sameStats(c.Stats(), comm.Stats{Calls: map[comm.Collective]int64{comm.Split: 1}, Bytes: map[comm.Key]int64{}}); err != nil {
			return fmt.Errorf("the parent's %w", err)
		}
		if err := sub.Close(); err != nil {
			return err
		}
		if _, err := c.Split(ctx, -1, 0); err == nil || !strings.Contains(err.Error(), "comm: split: color -1 outside") {
			return fmt.Errorf("split with color -1: got %v, want an error naming the color", err)
		}
		everyone := make([]int, n)
		for k := range everyone {
			everyone[k] = k
		}
		return sumOfRanks(ctx, c, r, everyone)
	})
}

// testMesh builds the mesh of every tensor-parallel size that divides the
// group's: each rank must sit at (r/TP, r%TP), and all-reduces over its
// row and column must sum exactly the ranks there, counted in the row's
// and the column's Stats; a size that does not divide must fail.
func testMesh(t *testing.T, comms []comm.Communicator) {
	n := comms[0].Size()
	parallel(t, comms, "mesh", func(c comm.Communicator) error {
		ctx := context.Background()
		r := c.Rank()
		for tp := 1; tp <= n; tp++ {
			if n%tp != 0 {
				continue
			}
			m, err := comm.NewMesh(ctx, c, tp)
			if err != nil {
				return err
			}
			dp := n / tp
			if m.DP != dp || m.TP != tp || m.Row != r/tp || m.Col != r%tp || m.Tensor.Rank() != r%tp || m.Data.Rank() != r/tp {
				return fmt.Errorf("tp %d: mesh %d×%d at (%d, %d), ranks %d and %d in its groups; want %d×%d at (%d, %d)",
					tp, m.DP, m.TP, m.Row, m.Col, m.Tensor.Rank(), m.Data.Rank(), dp, tp, r/tp, r%tp)
			}
			var row, col []int
			for k := range n {
				if k/tp == r/tp {
					row = append(row, k)
				}
				if k%tp == r%tp {
					col = append(col, k)
				}
			}
			for _, g := range []struct {
				name    string
				c       comm.Communicator
				members []int
			}{{"row", m.Tensor, row}, {"column", m.Data, col}} {
				if err := sumOfRanks(ctx, g.c, r, g.members); err != nil {
					return fmt.Errorf("tp %d: %s: %w", tp, g.name, err)
				}
				want := comm.Stats{Calls: map[comm.Collective]int64{comm.AllReduce: 1}, Bytes: map[comm.Key]int64{}}
				if len(g.members) > 1 {
					want.Bytes[comm.Key{Collective: comm.AllReduce, DType: dtype.F64}] = 8
				}
				if err := sameStats(g.c.Stats(), want); err != nil {
					return fmt.Errorf("tp %d: the %s's %w", tp, g.name, err)
				}
			}
			if err := m.Close(); err != nil {
				return err
			}
		}
		for _, tp := range []int{0, n + 1} {
			if _, err := comm.NewMesh(ctx, c, tp); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("tensor-parallel size %d does not divide %d ranks", tp, n)) {
				return fmt.Errorf("tp %d: got %v, want an error saying it does not divide %d", tp, err, n)
			}
		}
		return nil
	})
}

// sumOfRanks all-reduces rank r's number over c, whose ranks are the
// members, and checks the sum.
func sumOfRanks(ctx context.Context, c comm.Communicator, r int, members []int) error {
	var want float64
	for _, k := range members {
		want += float64(k)
	}
	got, err := comm.SumFloat64(ctx, c, float64(r))
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("sum of ranks %v is %v, want %v", members, got, want)
	}
	return nil
}

func sameStats(got, want comm.Stats) error {
	if !maps.Equal(got.Calls, want.Calls) || !maps.Equal(got.Bytes, want.Bytes) {
		return fmt.Errorf("Stats() = %v, want %v", got, want)
	}
	return nil
}
