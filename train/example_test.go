package train_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/train"
)

// quiet is an Observer that keeps the run's report to itself.
type quiet struct{ steps int }

func (*quiet) Warn(string)               {}
func (*quiet) Plan(*fabric.Plan, int)    {}
func (q *quiet) Step(train.Metrics, int) { q.steps++ }
func (*quiet) Done(*train.Summary)       {}

// Run is what weft train runs: here a tiny gpt learns Go source in
// bf16-mixed with FP8 GEMMs, on two ranks of fsdp (goroutines), and writes
// its run folder: metrics.jsonl, loss.png and a checkpoint to resume.
func ExampleRun() {
	dir, err := os.MkdirTemp("", "weft-train")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	c := train.Defaults()
	c.GPT = models.GPTConfig{Layers: 1, Width: 32, Heads: 2, Context: 16}
	c.Precision = "bf16-mixed+fp8"
	c.Strategy, c.Devices = "fsdp", 2
	c.Steps, c.BatchSize, c.EvalEvery, c.SaveEvery = 40, 8, 20, 40
	c.CorpusBytes = 256 << 10
	c.Out = filepath.Join(dir, "gpt")
	obs := &quiet{}
	sum, err := train.Run(context.Background(), c, false, obs)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("steps:", obs.steps, "of", sum.Steps)
	fmt.Println("validation loss fell:", sum.LastValLoss < sum.FirstValLoss)
	_, err = os.Stat(filepath.Join(c.Out, "metrics.jsonl"))
	fmt.Println("metrics.jsonl written:", err == nil)
	// Output:
	// steps: 40 of 40
	// validation loss fell: true
	// metrics.jsonl written: true
}
