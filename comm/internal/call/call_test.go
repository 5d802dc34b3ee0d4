package call

import (
	"testing"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
)

// TestChunkTiles checks that the ranks' chunks cover a buffer in order,
// without gaps or overlap, and split it only between elements.
func TestChunkTiles(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.F64, dtype.BF16, dtype.E4M3FN, dtype.E2M1} {
		for size := 1; size <= 5; size++ {
			for units := range 12 {
				n, end := units*comm.Unit(dt), 0
				for k := range size {
					lo, hi := Chunk(n, dt, size, k)
					if lo != end || hi < lo || lo%comm.Unit(dt) != 0 {
						t.Fatalf("Chunk(%d, %v, %d, %d) = %d, %d after %d", n, dt, size, k, lo, hi, end)
					}
					end = hi
				}
				if end != n {
					t.Errorf("%v, %d ranks: chunks of %d bytes end at %d", dt, size, n, end)
				}
			}
		}
	}
}
