package gemm

import "testing"

func BenchmarkTmpKernel(b *testing.B) {
	const kc = 256
	a := make([]float32, mr*kc)
	bb := make([]float32, nr*kc)
	c := make([]float32, 64)
	for b.Loop() {
		kernel32(kc, a, bb, c, 8)
	}
	b.ReportMetric(float64(2*mr*nr*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkTmpPack(b *testing.B) {
	const n = 16
	x := make([]float32, n*n)
	ws := make([]float32, n*n)
	for _, tr := range []bool{false, true} {
		o := operand[float32]{f: x, ld: n, trans: tr, scale: 1}
		b.Run("", func(b *testing.B) {
			for b.Loop() {
				o.pack(ws, 0, n, 0, n, nr, nil)
			}
		})
	}
}
