package data_test

import (
	"context"
	"testing"
	"time"

	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
)

// TestCNNLearnsGlyphs trains the reference cnn on glyph batches: a dataset
// it cannot learn would keep the loss near ln 10.
func TestCNNLearnsGlyphs(t *testing.T) {
	start := time.Now()
	m := models.NewCNN(nn.NewInit(0))
	opt, err := optim.NewAdamW(nn.Parameters(m), optim.AdamWConfig{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fabric.New(fabric.Config{Precision: precision.True{DType: dtype.F32}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Setup(m, opt); err != nil {
		t.Fatal(err)
	}
	var losses []float64
	for step := range 60 {
		res, err := f.TrainStep(context.Background(), m, data.GlyphBatch(data.GlyphConfig{Seed: 1}, 32, uint64(step)))
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, res.Loss)
	}
	first, last := mean(losses[:5]), mean(losses[len(losses)-5:])
	t.Logf("loss %.3f over the first 5 steps, %.3f over the last 5 (%v)", first, last, time.Since(start).Round(time.Millisecond))
	if last > 0.5*first {
		t.Errorf("loss fell from %.3f to %.3f, want below half", first, last)
	}
}

func mean(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}
