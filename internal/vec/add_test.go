package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAdd checks Add against its Go loop and against float32 addition over
// every length up to 150 at unaligned starts (the 64- and 16-element blocks,
// the tails and the dispatch), with guard elements after dst that must stay
// untouched. A NaN sum may carry either operand's payload.
func TestAdd(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const guard = 8
	for n := range 151 {
		off := rng.IntN(4)
		x := reluInputs(rng, n+off)[off:]
		orig := reluInputs(rng, n+off+guard)[off:]
		dst, want := append([]float32(nil), orig...), append([]float32(nil), orig...)
		Add(dst[:n], x)
		addGo(want[:n], x)
		for i := range dst {
			got, w := dst[i], want[i]
			if i < n {
				if w != orig[i]+x[i] && w == w {
					t.Fatalf("addGo, %d elements: [%d] = %v, want %v + %v", n, i, w, orig[i], x[i])
				}
			} else if math.Float32bits(got) != math.Float32bits(orig[i]) {
				t.Fatalf("Add, %d elements: wrote guard element %d", n, i-n)
			}
			if got != got && w != w {
				continue
			}
			if math.Float32bits(got) != math.Float32bits(w) {
				t.Fatalf("Add, %d elements: [%d] = %v, want %v", n, i, got, w)
			}
		}
	}
}
