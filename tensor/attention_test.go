package tensor_test

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// naiveAttention is CausalAttention's reference loop in float64 over
// qkv [B, T, 3C]: it returns y [B, T, C], the rows' log-sum-exp
// [B, heads, T] and, for
// y's gradient dy, the gradient of qkv.
func naiveAttention(qkv, dy []float64, b, t, c, heads int) (y, lse, dqkv []float64) {
	hs := c / heads
	s := 1 / math.Sqrt(float64(hs))
	y, lse, dqkv = make([]float64, b*t*c), make([]float64, b*heads*t), make([]float64, b*t*3*c)
	at := func(bi, ti, part, h, e int) int { return (bi*t+ti)*3*c + part*c + h*hs + e }
	for bi := range b {
		for h := range heads {
			p := make([][]float64, t)
			for i := range t {
				p[i] = make([]float64, i+1)
				mx := math.Inf(-1)
				for j := range i + 1 {
					var dot float64
					for e := range hs {
						dot += qkv[at(bi, i, 0, h, e)] * qkv[at(bi, j, 1, h, e)]
					}
					p[i][j] = dot * s
					mx = max(mx, p[i][j])
				}
				var sum float64
				for j := range p[i] {
					p[i][j] = math.Exp(p[i][j] - mx)
					sum += p[i][j]
				}
				lse[(bi*heads+h)*t+i] = mx + math.Log(sum)
				for j := range p[i] {
					p[i][j] /= sum
					for e := range hs {
						y[(bi*t+i)*c+h*hs+e] += p[i][j] * qkv[at(bi, j, 2, h, e)]
					}
				}
			}
			for i := range t {
				g := dy[(bi*t+i)*c+h*hs:][:hs]
				dp := make([]float64, i+1)
				var d float64
				for j := range i + 1 {
					for e := range hs {
						dp[j] += g[e] * qkv[at(bi, j, 2, h, e)]
						dqkv[at(bi, j, 2, h, e)] += p[i][j] * g[e]
					}
					d += dp[j] * p[i][j]
				}
				for j := range i + 1 {
					ds := p[i][j] * (dp[j] - d) * s
					for e := range hs {
						dqkv[at(bi, i, 0, h, e)] += ds * qkv[at(bi, j, 1, h, e)]
						dqkv[at(bi, j, 1, h, e)] += ds * qkv[at(bi, i, 0, h, e)]
					}
				}
			}
		}
	}
	return y, lse, dqkv
}

func gaussians(rng *rand.Rand, n int) []float64 {
	vals := make([]float64, n)
	for i := range vals {
		vals[i] = rng.NormFloat64()
	}
	return vals
}

func closeTo(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	for i, w := range want {
		if math.Abs(got[i]-w) > tol*max(1, math.Abs(w)) {
			t.Fatalf("%s[%d] = %.15g, reference loop %.15g", what, i, got[i], w)
		}
	}
}

// In float64 the tiled kernel computes the reference loop to 1e-12, with
// sequences of one partial tile, tiles cut by the diagonal and several
// ragged ones.
func TestCausalAttentionMatchesReferenceLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, seq := range []int{1, 7, 64, 130} {
		const b, c, heads = 2, 12, 3
		qkvVals, dyVals := gaussians(rng, b*seq*3*c), gaussians(rng, b*seq*c)
		qkv, dy := tensor.FromFloat64(qkvVals, b, seq, 3*c), tensor.FromFloat64(dyVals, b, seq, c)
		y, stats := tensor.CausalAttention(qkv, heads, dtype.F64)
		dqkv := tensor.CausalAttentionBackward(qkv, stats, dy, heads, dtype.F64)
		wantY, wantLSE, wantD := naiveAttention(qkvVals, dyVals, b, seq, c, heads)
		closeTo(t, "y", y.Float64s(), wantY, 1e-12)
		if !slices.Equal(stats.Shape(), []int{b, heads, seq, 2}) {
			t.Fatalf("stats shape %v", stats.Shape())
		}
		st := stats.Float64s()
		lse := make([]float64, len(st)/2)
		for i := range lse {
			lse[i] = st[2*i] + math.Log(st[2*i+1]) // max + log Σ exp(s - max)
		}
		closeTo(t, "log-sum-exp", lse, wantLSE, 1e-12)
		closeTo(t, "dqkv", dqkv.Float64s(), wantD, 1e-12)
	}
}

// The split between cores changes nothing: every (b, h, query tile) unit
// is computed whole by one goroutine, in the same order.
func TestCausalAttentionIndependentOfGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	rng := rand.New(rand.NewPCG(7, 8))
	const b, seq, c, heads = 2, 130, 48, 3
	qkvVals, dyVals := gaussians(rng, b*seq*3*c), gaussians(rng, b*seq*c)
	for _, p := range []struct{ dt, probs dtype.DType }{
		{dtype.F64, dtype.F64}, {dtype.F32, dtype.F32}, {dtype.BF16, dtype.F32}, {dtype.F16, dtype.F16},
	} {
		dt, probs := p.dt, p.probs
		qkv := tensor.FromFloat64(qkvVals, b, seq, 3*c).To(dt)
		dy := tensor.FromFloat64(dyVals, b, seq, c).To(dt)
		var first [][]byte
		for _, procs := range []int{1, 2, 3} {
			runtime.GOMAXPROCS(procs)
			y, stats := tensor.CausalAttention(qkv, heads, probs)
			dqkv := tensor.CausalAttentionBackward(qkv, stats, dy, heads, probs)
			got := [][]byte{slices.Clone(y.Data()), slices.Clone(stats.Data()), slices.Clone(dqkv.Data())}
			if first == nil {
				first = got
				continue
			}
			for i, name := range []string{"y", "stats", "dqkv"} {
				if !slices.Equal(got[i], first[i]) {
					t.Errorf("%s: %s with GOMAXPROCS=%d differs from GOMAXPROCS=1", dt, name, procs)
				}
			}
		}
	}
}

// Meta tensors get the results' shapes, and bad input a message.
func TestCausalAttentionShapes(t *testing.T) {
	y, stats := tensor.CausalAttention(tensor.Meta(dtype.BF16, 2, 9, 24), 4, dtype.F32)
	if !slices.Equal(y.Shape(), []int{2, 9, 8}) || y.DType() != dtype.BF16 || !slices.Equal(stats.Shape(), []int{2, 4, 9, 2}) || stats.DType() != dtype.F32 {
		t.Fatalf("meta results %v and %v", y, stats)
	}
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("3 heads over a width of 8 did not panic")
		}
	}()
	tensor.CausalAttention(tensor.Meta(dtype.F32, 2, 9, 24), 3, dtype.F32)
}
