package models_test

import (
	"context"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/train"
)

// TestBigramLogits: a bigram gives a row of V logits per token, for a
// sequence of any length, and one token's row depends on that token alone.
func TestBigramLogits(t *testing.T) {
	m := models.NewBigram(nn.NewInit(1), models.GPTConfig{Vocab: 10, Width: 8})
	tp := &autograd.Tape{NoGrad: true}
	logits, err := m.Forward(tp, data.Batch{Tokens: []int{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4}, Shape: []int{2, 12}})
	if err != nil {
		t.Fatal(err)
	}
	if got := logits.Value.Shape(); len(got) != 2 || got[0] != 24 || got[1] != 10 {
		t.Fatalf("logits %v, want [24 10]", got)
	}
	row := func(i int) []float32 { return logits.Value.Float32s()[i*10 : (i+1)*10] }
	for j, v := range row(1) { // tokens 1 and 3 are both id 1
		if v != row(3)[j] {
			t.Fatalf("id 1 gives logits %v at position 1 and %v at 3", row(1), row(3))
		}
	}
}

// TestBigramTrains: weft train's loop trains the registered bigram on the
// Go corpus, and its validation loss falls.
func TestBigramTrains(t *testing.T) {
	c := train.Defaults()
	c.Model, c.GPT.Context = "bigram", 16
	c.Steps, c.BatchSize, c.EvalEvery, c.SaveEvery, c.LR = 40, 16, 20, 40, 3e-2
	c.CorpusBytes, c.Out = 256<<10, t.TempDir()
	sum, err := train.Run(context.Background(), c, false, silent{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("validation loss %.4f -> %.4f", sum.FirstValLoss, sum.LastValLoss)
	if !(sum.LastValLoss < 0.8*sum.FirstValLoss) {
		t.Errorf("bigram validation loss %.4f -> %.4f: not 20%% lower", sum.FirstValLoss, sum.LastValLoss)
	}
}

// silent is an Observer that reports nothing.
type silent struct{}

func (silent) Warn(string)             {}
func (silent) Plan(*fabric.Plan, int)  {}
func (silent) Step(train.Metrics, int) {}
func (silent) Done(*train.Summary)     {}
