package strategy_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/local"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/strategy"
	"github.com/weftml/weft/tensor"
)

// TestReduceDType: bf16-true(reduce_dtype=float32) reduces bfloat16
// gradients as float32: under ddp and fsdp on 2 and 3 ranks each rank's
// mean gradient (or its chunk of it) is the ranks' gradients widened,
// summed and scaled in float32 and rounded once to bfloat16, to 1e-6;
// on 3 ranks bf16-true, whose mean is rounded twice (the sum, then its
// third), differs from it somewhere.
func TestReduceDType(t *testing.T) {
	const in, out = 10, 30
	grad := func(rank int) []float32 { // bfloat16 values whose sums need more bits
		g := make([]float32, in*out)
		for i := range g {
			g[i] = float32(math.Ldexp(1+float64((i*7+rank*13)%128)/128, (i+rank)%5-2))
			if i%3 == rank%3 {
				g[i] = -g[i]
			}
		}
		return g
	}
	for _, c := range []struct {
		spec, st string
		n        int
	}{
		{"bf16-true(reduce_dtype=float32)", "ddp", 2}, {"bf16-true(reduce_dtype=float32)", "fsdp", 2},
		{"bf16-true(reduce_dtype=float32)", "ddp", 3}, {"bf16-true(reduce_dtype=float32)", "fsdp", 3},
		{"bf16-true", "fsdp", 3},
	} {
		want := make([]float32, in*out)
		for r := range c.n {
			for i, v := range grad(r) {
				want[i] += v
			}
		}
		for i := range want {
			want[i] *= float32(1 / float64(c.n))
		}
		want = tensor.FromFloat32(want, in*out).To(dtype.BF16).Float32s()
		info, err := strategy.Lookup(c.st)
		if err != nil {
			t.Fatal(err)
		}
		differs := make([]bool, c.n)
		err = comm.Each(local.NewGroup(c.n, local.Options{}), func(r int, cm comm.Communicator) error {
			p, err := precision.Parse(c.spec, precision.Options{})
			if err != nil {
				return err
			}
			l := nn.NewLinear(nn.NewInit(1), in, out, false)
			if err := precision.ConvertModule(p, l); err != nil {
				return err
			}
			reduce := func(path string) (dtype.DType, bool) { return precision.ReduceDType(p, path) }
			rk, err := strategy.NewRank(info, cm, l, strategy.Comms{Reduce: reduce}, strategy.Options{})
			if err != nil {
				return err
			}
			l.Weight.Grad = tensor.FromFloat32(grad(r), out, in).To(dtype.BF16)
			if err := rk.SyncGrads(context.Background()); err != nil {
				return err
			}
			got, from := l.Weight.Grad, 0
			if info.Sharding.Gradients {
				index, count := rk.Chunks()
				got = rk.OptimizerParams()[0].Var.Grad
				from = index * strategy.Chunk(in*out, 1, count)
			}
			if got.DType() != dtype.BF16 {
				return fmt.Errorf("rank %d: the mean gradient is %s, want bfloat16", r, got.DType())
			}
			for i, v := range got.Float32s() {
				if from+i >= len(want) {
					break // padding
				}
				if w := want[from+i]; math.Abs(float64(v-w)) > 1e-6*max(1, math.Abs(float64(w))) {
					if c.spec == "bf16-true" {
						differs[r] = true
						return nil
					}
					return fmt.Errorf("rank %d: element %d of the mean gradient is %g, float32's rounded once %g", r, from+i, v, w)
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s under %s on %d ranks: %v", c.spec, c.st, c.n, err)
		}
		if c.spec == "bf16-true" && !slices.Contains(differs, true) {
			t.Errorf("%s under %s on %d ranks: the bfloat16 reduction matches float32's everywhere; the test shows nothing", c.spec, c.st, c.n)
		}
	}
}
