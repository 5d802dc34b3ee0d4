package parallel_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	_ "github.com/weftml/weft/comm/local"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/parallel"
	"github.com/weftml/weft/tensor"
)

var eightHeads = models.GPTConfig{Vocab: 20, Context: 8, Width: 32, Heads: 8, Layers: 2}

// newGPT is a float64 gpt from seed 7.
func newGPT() *models.GPT {
	g := models.NewGPT(nn.NewInit(7), eightHeads)
	nn.Walk(g, func(_ string, m nn.Module) { nn.CastOwn(m, dtype.F64) })
	return g
}

func batch() data.Batch {
	rng := rand.New(rand.NewPCG(1, 2))
	b := data.Batch{Shape: []int{4, eightHeads.Context}}
	for range 4 * eightHeads.Context {
		b.Tokens = append(b.Tokens, rng.IntN(eightHeads.Vocab))
		b.Targets = append(b.Targets, rng.IntN(eightHeads.Vocab))
	}
	return b
}

// pass runs forward and backward of g on b and returns the loss.
func pass(t *testing.T, g *models.GPT, l *parallel.Layout) float64 {
	loss, err := tryPass(g, l, batch())
	if err != nil {
		t.Fatal(err)
	}
	return loss
}

// tryPass is pass on b, returning its error.
func tryPass(g *models.GPT, l *parallel.Layout, b data.Batch) (float64, error) {
	var tp autograd.Tape
	var loss float64
	run := func() error {
		logits, err := g.Forward(&tp, b)
		if err != nil {
			return err
		}
		ce, err := tp.CrossEntropy(logits, b.Targets)
		if err != nil {
			return err
		}
		loss = ce.Value.Item()
		return tp.Backward(ce)
	}
	if l == nil {
		return loss, run()
	}
	tp.Scoper = l.Scoper(nil)
	return loss, l.Guard(context.Background(), run)
}

// TestSplitGPTMatchesOneDevice: a gpt of 8 heads split over 2 and 4 ranks
// by models.GPTPlan, and with sequence parallelism by GPTSequencePlan,
// computes the one-device loss and, gathered, the one-device gradient of
// every parameter accumulated over two passes, to 1e-12; each rank's qkv
// holds 1/T of the weight.
func TestSplitGPTMatchesOneDevice(t *testing.T) {
	one := newGPT()
	want := pass(t, one, nil)
	pass(t, one, nil)
	wantGrads := map[string]*tensor.Tensor{}
	for _, p := range nn.Parameters(one) {
		wantGrads[p.Path] = p.Var.Grad
	}
	plans := map[string]parallel.Plan{"tp": models.GPTPlan, "sequence": models.GPTSequencePlan}
	for _, name := range []string{"tp", "sequence"} {
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprint(name, n), func(t *testing.T) { splitMatches(t, plans[name], n, want, wantGrads) })
		}
	}
}

func splitMatches(t *testing.T, plan parallel.Plan, n int, want float64, wantGrads map[string]*tensor.Tensor) {
	comms, err := comm.Open("local", n, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = comm.Each(comms, func(_ int, c comm.Communicator) error {
		g := newGPT()
		qkvBytes := g.Blocks[0].Attn.QKV.Weight.Value.Bytes()
		l, err := parallel.Parallelize(g, c, plan)
		if err != nil {
			return err
		}
		if len(l.Linears) != 4*eightHeads.Layers {
			return fmt.Errorf("%d Linears split, want %d", len(l.Linears), 4*eightHeads.Layers)
		}
		if got := g.Blocks[0].Attn.QKV.Weight.Value.Bytes(); got*n != qkvBytes {
			return fmt.Errorf("rank %d's qkv weight takes %d bytes, want 1/%d of %d", c.Rank(), got, n, qkvBytes)
		}
		for range 2 {
			got, err := tryPass(g, l, batch())
			if err != nil {
				return err
			}
			if math.Abs(got-want) > 1e-12 {
				return fmt.Errorf("rank %d: loss %.15g, one device %.15g", c.Rank(), got, want)
			}
		}
		// Gradients, gathered as parameters are.
		for _, p := range nn.Parameters(g) {
			p.Var.Value, p.Var.Grad = p.Var.Grad, p.Var.Value
		}
		whole, err := l.Whole(context.Background())
		if err != nil {
			return err
		}
		for _, p := range nn.Parameters(g) {
			got := p.Var.Value
			if w, ok := whole[p.Var]; ok {
				got = w
			}
			if d := maxDiff(got, wantGrads[p.Path]); d > 1e-12 {
				return fmt.Errorf("rank %d: gradient of %s differs by %g", c.Rank(), p.Path, d)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func maxDiff(a, b *tensor.Tensor) float64 {
	if !a.SameShape(b) {
		return math.Inf(1)
	}
	av, bv := a.Float64s(), b.Float64s()
	d := 0.0
	for i := range av {
		d = max(d, math.Abs(av[i]-bv[i]))
	}
	return d
}

// TestParallelizeRejectsHalfHeads: 2 heads over 4 ranks would give each
// rank half a head's q, k and v columns; the attention refuses the split
// although every Linear's features divide.
func TestParallelizeRejectsHalfHeads(t *testing.T) {
	comms, err := comm.Open("local", 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = comm.Each(comms, func(_ int, c comm.Communicator) error {
		cfg := eightHeads
		cfg.Heads = 2
		_, err := parallel.Parallelize(models.NewGPT(nn.NewInit(7), cfg), c, models.GPTPlan)
		if want := "parallel: blocks.0: 2 attention heads do not split evenly over 4 ranks"; err == nil || err.Error() != want {
			return fmt.Errorf("error %v, want %q", err, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestParallelizeRejects: plans that cannot apply fail with the module
// named, before any weight changes.
func TestParallelizeRejects(t *testing.T) {
	comms, err := comm.Open("local", 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		plan parallel.Plan
		want string
	}{
		{parallel.Plan{"head": parallel.Colwise{Parts: 3}}, "head [20 32]: 20 output features in 3 fused parts do not split evenly over 3 ranks"},
		{parallel.Plan{"head": parallel.Rowwise{}}, "head [20 32]: 32 input features do not split evenly over 3 ranks"},
		{parallel.Plan{"blocks.*.qkv": parallel.Colwise{Parts: 3}}, "blocks.0.qkv [96 32]: 96 output features in 3 fused parts do not split evenly over 3 ranks"},
		{parallel.Plan{"blocks.*.ln1": parallel.Rowwise{}}, "plan names blocks.0.ln1, a LayerNorm; only Linears split"},
		{parallel.Plan{"blocks.*.qvk": parallel.Rowwise{}}, `plan "blocks.*.qvk" matches no module`},
		{parallel.Plan{"blocks.*.fc": parallel.Colwise{}, "blocks.0.fc": parallel.Rowwise{}}, "column-parallel module row-parallel"},
	}
	err = comm.Each(comms, func(_ int, c comm.Communicator) error {
		for _, tc := range cases {
			g := newGPT()
			before := g.Blocks[0].FC.Weight.Value
			_, err := parallel.Parallelize(g, c, tc.plan)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				return fmt.Errorf("plan %v: error %v, want %q", tc.plan, err, tc.want)
			}
			if g.Blocks[0].FC.Weight.Value != before {
				return fmt.Errorf("plan %v: a failed Parallelize changed the model", tc.plan)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRuns: each rank's runs place its share of every split parameter of
// the gpt (fused q|k|v rows, plain rows, row-split columns, a split bias)
// where Share cuts it from the whole: share element j is whole element
// run.Whole + j - run.At.
func TestRuns(t *testing.T) {
	const n = 2
	comms, err := comm.Open("local", n, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := models.GPTConfig{Vocab: 16, Context: 4, Width: 8, Heads: 2, Layers: 1}
	err = comm.Each(comms, func(_ int, c comm.Communicator) error {
		g := models.NewGPT(nn.NewInit(7), cfg)
		l, err := parallel.Parallelize(g, c, models.GPTPlan)
		if err != nil {
			return err
		}
		for _, p := range nn.Parameters(g) {
			runs := l.Runs(p.Var)
			if !l.Splits(p.Path) {
				if runs != nil {
					return fmt.Errorf("%s is whole, yet has runs %v", p.Path, runs)
				}
				continue
			}
			shape := l.WholeShape(p.Var)
			index := tensor.Generate(func(dst []float32) {
				for i := range dst {
					dst[i] = float32(i)
				}
			}, shape...)
			share, err := l.Share(p.Var, index)
			if err != nil {
				return err
			}
			k := 0
			for j, w := range share.Float32s() {
				for k+1 < len(runs) && runs[k+1].At <= j {
					k++
				}
				if want := runs[k].Whole + j - runs[k].At; int(w) != want {
					return fmt.Errorf("rank %d: %s share element %d is whole element %d, runs say %d", c.Rank(), p.Path, j, int(w), want)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
