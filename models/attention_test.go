package models_test

import (
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/tensor"
)

// gptPass runs a forward and backward pass of g over batch with every
// block's attention op by op or fused, and returns the bytes the tape
// holds for backward when the forward ends and the allocator's peak over
// the pass (from the bytes live before it).
func gptPass(t *testing.T, g *models.GPT, caster autograd.Caster, batch data.Batch, opByOp bool) (retained, peak int64) {
	t.Helper()
	for _, blk := range g.Blocks {
		blk.Attn.OpByOp = opByOp
	}
	tensor.ResetPeak()
	tp := &autograd.Tape{Caster: caster, Recycle: true}
	logits, err := g.Forward(tp, batch)
	if err != nil {
		t.Fatal(err)
	}
	loss, err := tp.CrossEntropy(logits, batch.Targets)
	if err != nil {
		t.Fatal(err)
	}
	retained = tp.RetainedPool()
	if err := tp.Backward(loss); err != nil {
		t.Fatal(err)
	}
	peak = tensor.Memory().Peak
	for _, p := range nn.Parameters(g) {
		tensor.Free(p.Var.Grad)
		p.Var.Grad = nil
	}
	return retained, peak
}

// The fused attention keeps none of the (B, heads, T, T) tensors the op-by-op
// path keeps for backward, and the allocator's peak falls by at least
// those bytes less the row statistics it keeps instead: at context 256,
// per layer, the probabilities softmax's backward and the product with v
// read (the scores before them are freed as the attention returns), in
// float32 under 32-true, in float32 and cast to bf16 under bf16-mixed.
func TestFusedAttentionLowersPeak(t *testing.T) {
	cfg := models.GPTConfig{Vocab: 64, Context: 256, Width: 64, Heads: 4, Layers: 2}
	const batchSize = 2
	tokens := make([]int, batchSize*cfg.Context)
	for i := range tokens {
		tokens[i] = (i * 7) % cfg.Vocab
	}
	batch := data.Batch{Tokens: tokens, Shape: []int{batchSize, cfg.Context}, Targets: tokens}
	scores := int64(batchSize * cfg.Heads * cfg.Context * cfg.Context)
	stats := int64(batchSize*cfg.Heads*cfg.Context) * 2 * 4 // a maximum and a sum per row
	for _, c := range []struct {
		spec       string
		scoreBytes int64 // bytes the op-by-op path keeps per score
	}{{"32-true", 4}, {"bf16-mixed", 4 + 2}} {
		p, err := precision.Parse(c.spec, precision.Options{})
		if err != nil {
			t.Fatal(err)
		}
		g := models.NewGPT(nn.NewInit(1), cfg)
		caster := precision.Autocast(p)
		gptPass(t, g, caster, batch, false) // warm the pool for both
		oldRetained, oldPeak := gptPass(t, g, caster, batch, true)
		newRetained, newPeak := gptPass(t, g, caster, batch, false)
		want := int64(cfg.Layers) * (scores*c.scoreBytes - stats)
		if d := oldRetained - newRetained; d < want {
			t.Errorf("%s: the fused tape keeps %d bytes for backward, op by op %d: %d fewer, want ≥ %d", c.spec, newRetained, oldRetained, d, want)
		}
		if d := oldPeak - newPeak; d < want {
			t.Errorf("%s: peak %d bytes fused, %d op by op: %d lower, want ≥ %d", c.spec, newPeak, oldPeak, d, want)
		}
		t.Logf("%s: retained %d → %d bytes, peak %d → %d bytes (bound %d)", c.spec, oldRetained, newRetained, oldPeak, newPeak, want)
	}
}
