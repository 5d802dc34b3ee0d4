// Package call holds what backends share about a collective call: a
// description that ranks compare to catch mismatched calls, and how ranks
// split a reduction's work.
package call

import (
	"fmt"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
)

// Call describes one collective call; every rank of a group must make the
// same one.
type Call struct {
	Collective comm.Collective
	DType      dtype.DType // dtype.Invalid for collectives that do not reduce
	Op         comm.Op     // 0 for collectives that do not reduce
	Root       int         // Broadcast's root
	Bytes      int         // per rank: len(buf); len(send) in AllGather, len(recv) in ReduceScatter
}

func (c Call) String() string {
	s := fmt.Sprintf("%s of %d bytes", c.Collective, c.Bytes)
	if c.Op != 0 {
		s += fmt.Sprintf(" (%v %v)", c.Op, c.DType)
	}
	if c.Collective == comm.Broadcast {
		s += fmt.Sprintf(" from rank %d", c.Root)
	}
	return s
}

// Mismatch returns the error for rank a calling ca where rank b called cb.
func Mismatch(a int, ca Call, b int, cb Call) error {
	return fmt.Errorf("ranks disagree: rank %d called %v, rank %d called %v", a, ca, b, cb)
}

// Chunk returns the part [lo, hi) of an n-byte buffer of dt that rank k of
// size reduces when ranks share a reduction's work: contiguous, as even as
// whole elements allow, in rank order.
func Chunk(n int, dt dtype.DType, size, k int) (lo, hi int) {
	u := comm.Unit(dt)
	units := n / u
	return u * (k * units / size), u * ((k + 1) * units / size)
}
