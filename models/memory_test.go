package models_test

import (
	"slices"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/tensor"
)

// TestGPTKeepsWhatBackwardReads: a gpt's forward leaves on the tape only
// what backward reads, as PyTorch's autograd saves it, and the gradients
// are bit for bit those of a tape that keeps every result (one that does
// not recycle). In 32-true, with N = B·T·C and R = B·T rows, each block
// keeps ln1's result (N) and its mean and rstd (2R), qkv (3N), the
// attention's result (N) and row statistics (B·nh·T·2), the first
// residual sum (N), ln2's (N, 2R), fc's result (4N), its GELU (4N) and
// the block's output (N): 16N + 4R + 2·B·nh·T floats. The projections'
// results, read by nothing but the residual Adds, GELU's Φ(x) and the
// embeddings' rows are freed: 6N a block and the embeddings' 2 tensors
// fewer than the tape held when every result lived until backward. Past
// the blocks: the sum of the embeddings (N), ln_f's (N, 2R), the logits.
func TestGPTKeepsWhatBackwardReads(t *testing.T) {
	cfg := models.GPTConfig{Vocab: 48, Context: 32, Width: 32, Heads: 2, Layers: 3}
	const bs = 2
	tokens := make([]int, bs*cfg.Context)
	for i := range tokens {
		tokens[i] = (i*5 + 1) % cfg.Vocab
	}
	batch := data.Batch{Tokens: tokens, Shape: []int{bs, cfg.Context}, Targets: tokens}
	n, r := int64(bs*cfg.Context*cfg.Width), int64(bs*cfg.Context)
	perBlock := 16*n + 4*r + 2*bs*int64(cfg.Heads*cfg.Context)
	want := 4 * (int64(cfg.Layers)*perBlock + 2*n + 2*r + r*int64(cfg.Vocab))
	for _, spec := range []string{"32-true", "bf16-mixed"} {
		p, err := precision.Parse(spec, precision.Options{})
		if err != nil {
			t.Fatal(err)
		}
		g := models.NewGPT(nn.NewInit(1), cfg)
		pass := func(recycle bool) (retained int64, grads [][]float64) {
			tp := &autograd.Tape{Caster: precision.Autocast(p), Recycle: recycle}
			logits, err := g.Forward(tp, batch)
			if err != nil {
				t.Fatal(err)
			}
			_, retained = tp.Retained()
			loss, err := tp.CrossEntropy(logits, batch.Targets)
			if err != nil {
				t.Fatal(err)
			}
			if err := tp.Backward(loss); err != nil {
				t.Fatal(err)
			}
			for _, q := range nn.Parameters(g) {
				grads = append(grads, q.Var.Grad.Float64s())
				tensor.Free(q.Var.Grad)
				q.Var.Grad = nil
			}
			return retained, grads
		}
		kept, wantGrads := pass(false)
		retained, grads := pass(true)
		if spec == "32-true" && retained != want {
			t.Errorf("%s: the forward leaves %d bytes on the tape; want %d", spec, retained, want)
		}
		t.Logf("%s: the forward leaves %d bytes on the tape, %d kept without recycling", spec, retained, kept)
		for i := range wantGrads {
			if !slices.Equal(grads[i], wantGrads[i]) {
				t.Errorf("%s: gradient %d differs from a tape that keeps every result", spec, i)
			}
		}
	}
}
