package dtype

import (
	"bufio"
	"math"
	"math/big"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestBF16StochasticRoundOracle: every row of the Python oracle's table
// (testdata/bf16-sr/oracle.py: ±0, ±inf, NaNs, the largest finite,
// denormals, random patterns, each under edge and random bits) rounds to
// its bfloat16 bits.
func TestBF16StochasticRoundOracle(t *testing.T) {
	f, err := os.Open("../testdata/bf16-sr/bf16_sr.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	rows := 0
	for sc.Scan() {
		var v [3]uint64
		for i, s := range strings.Split(sc.Text(), ",") {
			if v[i], err = strconv.ParseUint(s, 16, 32); err != nil {
				t.Fatalf("row %q: %v", sc.Text(), err)
			}
		}
		if got := BF16StochasticRound(math.Float32frombits(uint32(v[0])), uint16(v[1])); got != uint16(v[2]) {
			t.Errorf("x %08x, r %04x: %04x, the oracle's %04x", v[0], v[1], got, v[2])
		}
		rows++
	}
	if rows < 800 {
		t.Fatalf("%d rows; the oracle writes over 800", rows)
	}
}

// TestBF16StochasticRoundUnbiased: over all 2^16 random words a finite x
// rounds to values whose mean is x exactly, and each to one of its two
// bfloat16 neighbours.
func TestBF16StochasticRoundUnbiased(t *testing.T) {
	for _, x := range []float32{0.1, -3.14159, 1e-40, -1e30, 1, 65504.7} {
		down := F32FromBF16(uint16(math.Float32bits(x) >> 16))
		sum := new(big.Float).SetPrec(200)
		for r := range 1 << 16 {
			y := F32FromBF16(BF16StochasticRound(x, uint16(r)))
			if y != down && math.Abs(float64(y)) <= math.Abs(float64(down)) {
				t.Fatalf("x %v, r %d: %v is not a neighbour", x, r, y)
			}
			sum.Add(sum, new(big.Float).SetFloat64(float64(y)))
		}
		mean := sum.Quo(sum, new(big.Float).SetInt64(1<<16))
		if mean.Cmp(new(big.Float).SetFloat64(float64(x))) != 0 {
			t.Errorf("x %v: mean of its roundings %v", x, mean)
		}
	}
}
