package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// reluInputs mixes every class of float32: zeros of both signs, subnormals,
// normals of all sizes, infinities and NaNs with payloads.
func reluInputs(rng *rand.Rand, n int) []float32 {
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-45, -1e-45, 1, -1,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(0xffc00001), math.Float32frombits(0x7f800001)}
	out := make([]float32, n)
	for i := range out {
		if i%3 == 0 {
			out[i] = special[rng.IntN(len(special))]
		} else {
			out[i] = math.Float32frombits(rng.Uint32())
		}
	}
	return out
}

func sameBits(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

// TestReLU checks the kernels against their Go loops bit for bit, and the
// Go loops against the semantics they promise, over every length up to 70
// at unaligned starts (the tails and the dispatch).
func TestReLU(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for n := range 71 {
		off := rng.IntN(4)
		x, dy := reluInputs(rng, n+off)[off:], reluInputs(rng, n+off)[off:]
		y, want := make([]float32, n), make([]float32, n)
		ReLU(y, x)
		reluGo(want, x)
		if !sameBits(y, want) {
			t.Fatalf("ReLU, %d elements: %v, want %v", n, y, want)
		}
		for i, v := range x {
			switch {
			case v != v:
				if y[i] == y[i] {
					t.Fatalf("ReLU(NaN) = %v", y[i])
				}
			case v > 0 && y[i] != v, v <= 0 && math.Float32bits(y[i]) != 0:
				t.Fatalf("ReLU(%v) = %v", v, y[i])
			}
		}
		dx, wantDX := make([]float32, n), make([]float32, n)
		ReLUBackward(dx, y, dy)
		reluBackwardGo(wantDX, y, dy)
		if !sameBits(dx, wantDX) {
			t.Fatalf("ReLUBackward, %d elements: %v, want %v", n, dx, wantDX)
		}
		for i, v := range y {
			if keep := !(v <= 0); keep && math.Float32bits(dx[i]) != math.Float32bits(dy[i]) || !keep && math.Float32bits(dx[i]) != 0 {
				t.Fatalf("ReLUBackward at y = %v, dy = %v: %v", v, dy[i], dx[i])
			}
		}
	}
}

func BenchmarkReLUBackward(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	y, dy, dx := make([]float32, 1<<14), make([]float32, 1<<14), make([]float32, 1<<14)
	for i := range y {
		y[i], dy[i] = max(float32(rng.NormFloat64()), 0), float32(rng.NormFloat64())
	}
	b.Run("go", func(b *testing.B) {
		for b.Loop() {
			reluBackwardGo(dx, y, dy)
		}
	})
	b.Run("vec", func(b *testing.B) {
		for b.Loop() {
			ReLUBackward(dx, y, dy)
		}
	})
}
