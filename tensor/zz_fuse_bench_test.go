package tensor_test

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// BenchmarkFuseLinear: the gpt 6/384 batch 8 FC layer, x (2048, 384) · w (1536, 384)ᵀ + b.
func BenchmarkFuseLinear(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	rnd := func(shape ...int) *tensor.Tensor {
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return tensor.FromFloat32(v, shape...)
	}
	x, w, bias := rnd(2048, 384), rnd(1536, 384), rnd(1536)
	for _, dt := range []dtype.DType{dtype.F32, dtype.BF16} {
		xd, wd, bd := x.To(dt), w.To(dt), bias.To(dt)
		dy := rnd(2048, 1536).To(dt)
		b.Run(dt.String()+"/fwd", func(b *testing.B) {
			defer cpuMetric(b)()
			for b.Loop() {
				tensor.Release(tensor.Linear(xd, wd, bd))
			}
		})
		b.Run(dt.String()+"/dx", func(b *testing.B) {
			defer cpuMetric(b)()
			for b.Loop() {
				tensor.Release(tensor.MatMul(dy, wd, false, false))
			}
		})
		b.Run(dt.String()+"/dbias", func(b *testing.B) {
			defer cpuMetric(b)()
			for b.Loop() {
				tensor.Release(tensor.ReduceBroadcast(dy, []int{1536}, 1, dt))
			}
		})
	}
}

// cpuMetric reports the process's CPU time per op: what the op costs
// whatever else the machine runs.
func cpuMetric(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	c0 := cpu()
	return func() { b.ReportMetric(float64(cpu()-c0)/float64(b.N)/1e6, "cpu-ms/op") }
}
