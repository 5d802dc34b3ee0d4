package gemm

import (
	"fmt"
	"testing"
)

func BenchmarkTmpDirect(b *testing.B) {
	for _, n := range []int{64, 96, 128, 192} {
		for _, tb := range []bool{false} {
			for _, dm := range []int{0} {
				b.Run(fmt.Sprintf("n=%d/tb=%v/direct=%v", n, tb, dm > 0), func(b *testing.B) {
					old := directMax
					directMax = dm
					defer func() { directMax = old }()
					x, c := make([]float32, n*n), make([]float32, n*n)
					for b.Loop() {
						Sgemm(false, tb, n, n, n, x, n, x, n, 0, c, n)
					}
					reportGFLOPS(b, n, n, n)
				})
			}
		}
	}
}
