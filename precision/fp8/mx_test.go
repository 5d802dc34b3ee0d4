package fp8

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weftml/weft/dtype"
)

// TestRoundBlock pins MX block casts: scale 2^(floor(log2(amax)) - emax),
// saturation above the format's max, ties to even below its smallest
// subnormal, and E8M0's range.
func TestRoundBlock(t *testing.T) {
	for _, c := range []struct {
		dt       dtype.DType
		in, want []float32
	}{
		// amax 1: e = -8, elements ·256.
		{dtype.E4M3FN, []float32{1, -0x1p-12, 0.3}, []float32{1, -0x1p-12, 0.3125}},
		// amax 1.9: 1.9·256 = 486.4 saturates to 448 = 1.75·256.
		{dtype.E4M3FN, []float32{1.9, 1}, []float32{1.75, 1}},
		// 2^-18·256 = 2^-10 is half E4M3's smallest subnormal: a tie, to 0;
		// 3·2^-19·256 rounds up to 2^-9.
		{dtype.E4M3FN, []float32{1, 0x1p-18, 3 * 0x1p-19}, []float32{1, 0, 0x1p-17}},
		// E5M2: emax 15, so 2^-20 next to 1 keeps its value.
		{dtype.E5M2, []float32{1, 0x1p-20}, []float32{1, 0x1p-20}},
		// A subnormal amax needs e = -148, clamped to E8M0's -127.
		{dtype.E4M3FN, []float32{0x1p-140, 0}, []float32{0, 0}},
		{dtype.E4M3FN, []float32{0, 0}, []float32{0, 0}},
	} {
		got := slices.Clone(c.in)
		castBlock(got, mxScale(amaxOf(got), c.dt))
		if !slices.Equal(got, c.want) {
			t.Errorf("castBlock(mxScale, %v, %s) = %v, want %v", c.in, c.dt, got, c.want)
		}
	}
}

// TestBlocksAlong checks that blocks run along the reduction axis: rows of
// the stored matrix for axis 1, columns for axis 0, with a short last block.
func TestBlocksAlong(t *testing.T) {
	const rows, cols = 40, 36
	rng := rand.New(rand.NewPCG(5, 6))
	vals := make([]float32, rows*cols)
	for i := range vals { // magnitudes differ by row and by column, so blocks matter
		vals[i] = float32(math.Ldexp(rng.NormFloat64(), 3*(i/cols%4)-2*(i%cols%5)))
	}
	b := blocks{vals: vals, rows: rows, cols: cols, dt: dtype.E4M3FN, size: BlockSize, scale: mxScale}
	byRow, byCol := b.along(1).t.Float32s(), b.along(0).t.Float32s()
	if slices.Equal(byRow, byCol) {
		t.Fatal("the data does not tell blocks along rows from blocks down columns")
	}
	want := func(line []int) []float32 { // line: indices of one row or column
		var out []float32
		for start := 0; start < len(line); start += BlockSize {
			blk := make([]float32, 0, BlockSize)
			for _, i := range line[start:min(start+BlockSize, len(line))] {
				blk = append(blk, vals[i])
			}
			castBlock(blk, mxScale(amaxOf(blk), dtype.E4M3FN))
			out = append(out, blk...)
		}
		return out
	}
	for r := range rows {
		line := make([]int, cols)
		for c := range line {
			line[c] = r*cols + c
		}
		for c, v := range want(line) {
			if byRow[line[c]] != v {
				t.Fatalf("along rows: [%d,%d] = %v, want %v", r, c, byRow[line[c]], v)
			}
		}
	}
	for c := range cols {
		line := make([]int, rows)
		for r := range line {
			line[r] = r*cols + c
		}
		for r, v := range want(line) {
			if byCol[line[r]] != v {
				t.Fatalf("down columns: [%d,%d] = %v, want %v", r, c, byCol[line[r]], v)
			}
		}
	}
}
