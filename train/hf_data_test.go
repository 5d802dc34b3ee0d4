package train

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeText fills a new folder with files of sentences drawn from words,
// as a user's own text folder would hold.
func writeText(t *testing.T, seed uint64, words []string) string {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(seed, 0))
	for f := range 3 {
		var b strings.Builder
		for range 400 {
			for i := range 4 + rng.IntN(4) {
				if i > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(words[rng.IntN(len(words))])
			}
			b.WriteString(".\n")
		}
		if err := os.WriteFile(filepath.Join(dir, string(rune('a'+f))+".txt"), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestQLoRAFromExportOnOwnText: a gpt trained by Run on a folder of text
// (byte tokenizer, 256 ids), exported in the GPT-2 layout, is fine-tuned
// with QLoRA from that export on another folder of text, and the
// validation loss there falls. An export of a gpt trained on the Go
// corpus (98 ids) is refused for byte-level text with an error that says
// so.
func TestQLoRAFromExportOnOwnText(t *testing.T) {
	base := tinyConfig(t, "32-true")
	base.Data, base.Steps = writeText(t, 1, strings.Fields("the a cat dog sat ran on under mat log big small")), 30
	if _, err := Run(context.Background(), base, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	folder := filepath.Join(t.TempDir(), "gpt2")
	if err := Export(base.Out, "gpt2", folder); err != nil {
		t.Fatal(err)
	}
	ft := tinyConfig(t, "bf16-true+nf4-dq")
	ft.Data = writeText(t, 2, strings.Fields("one two three four five six seven eight nine ten and then"))
	ft.InitFrom, ft.Steps, ft.EvalEvery = folder, 40, 20
	ft.LoRA = LoRA{Targets: []string{"blocks.*.qkv", "blocks.*.fc"}, Rank: 8, Alpha: 16}
	sum, err := Run(context.Background(), ft, false, quiet{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("validation loss on the new text %.4f -> %.4f", sum.FirstValLoss, sum.LastValLoss)
	if !(sum.LastValLoss < 0.95*sum.FirstValLoss) || sum.QuantizedBytes == 0 {
		t.Errorf("validation loss on the new text %.4f -> %.4f with %d quantized bytes", sum.FirstValLoss, sum.LastValLoss, sum.QuantizedBytes)
	}

	corpus := tinyConfig(t, "32-true")
	corpus.Steps, corpus.SaveEvery = 2, 2
	if _, err := Run(context.Background(), corpus, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	narrow := filepath.Join(t.TempDir(), "gpt2")
	if err := Export(corpus.Out, "gpt2", narrow); err != nil {
		t.Fatal(err)
	}
	ft.InitFrom, ft.Out = narrow, t.TempDir()
	_, err = Run(context.Background(), ft, false, quiet{})
	if err == nil || !strings.Contains(err.Error(), "its model takes 98 token ids") || !strings.Contains(err.Error(), "the run's tokenizer needs 256 ids") {
		t.Fatalf("QLoRA of a corpus-vocabulary export on byte-level text: %v", err)
	}
}
