// Command fsdploop trains a small gpt with FSDP and bf16-mixed on two ranks,
// goroutines of this process, written from docs/fabric.md alone: one
// fabric.Config per rank, a Loader that gives each rank its half of every
// global batch, TrainStep, and a validation pass with EvalLoss.
package main

import (
	"context"
	"io"
	"log"
	"math"
	"os"
	"strings"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/local"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
)

const (
	ranks = 2
	steps = 40
)

var gpt = models.GPTConfig{Vocab: 256, Context: 16, Width: 32, Heads: 2, Layers: 2}

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run trains on every rank and prints, from rank 0, what the ranks held
// and how the loss went.
func run(w io.Writer) error {
	text, err := data.Encode(data.Bytes{}, strings.Repeat("the quick brown fox jumps over the lazy dog. ", 40))
	if err != nil {
		return err
	}
	return comm.Each(local.NewGroup(ranks, local.Options{}), func(_ int, c comm.Communicator) error {
		return trainRank(w, c, text)
	})
}

// trainRank is one rank's loop: its own plugin and fabric, its chunks of
// every parameter, its share of every batch.
func trainRank(w io.Writer, c comm.Communicator, text data.Tokens) error {
	p, err := precision.Parse("bf16-mixed", precision.Options{})
	if err != nil {
		return err
	}
	f, err := fabric.New(fabric.Config{Precision: p, Strategy: "fsdp", Comm: c, Seed: 1})
	if err != nil {
		return err
	}
	model := models.NewGPT(f.InitModule(true), gpt) // shapes only: Setup draws this rank's chunks
	var whole int64
	for _, prm := range nn.Parameters(model) {
		whole += 4 * int64(prm.Var.Value.Len()) // float32 masters
	}
	opt, err := optim.NewAdamW(nn.Parameters(model), optim.AdamWConfig{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
	if err != nil {
		return err
	}
	if err := f.Setup(model, opt); err != nil {
		return err
	}
	sampler := data.NewTokenSampler(text, 8, 16, 1) // the same global batches on every rank
	batches := f.SetupDataLoader(fabric.DatasetFunc(func(i uint64) (data.Batch, error) { sampler.Seek(i); return sampler.Next(), nil }))
	before, err := validate(f, model, text)
	if err != nil {
		return err
	}
	var held int64
	for range steps {
		b, err := batches.Next() // this rank's 4 of the 8 windows
		if err != nil {
			return err
		}
		res, err := f.TrainStep(context.Background(), model, b)
		if err != nil {
			return err
		}
		held = res.ParamBytes
	}
	after, err := validate(f, model, text)
	if err != nil {
		return err
	}
	half := math.Abs(float64(ranks*held-whole)) < 0.01*float64(whole)
	if _, err := f.Print(w, "each rank holds half of the parameters:", half); err != nil {
		return err
	}
	_, err = f.Print(w, "validation loss fell by more than half:", after < before/2)
	return err
}

// validate is the mean loss over two global batches the training never
// draws, each rank evaluating its share.
func validate(f *fabric.Fabric, model *models.GPT, text data.Tokens) (float64, error) {
	val := data.NewTokenSampler(text, 8, 16, 99)
	loader := f.SetupDataLoader(fabric.DatasetFunc(func(i uint64) (data.Batch, error) { val.Seek(i); return val.Next(), nil }))
	var shares []data.Batch
	for range 2 {
		b, err := loader.Next()
		if err != nil {
			return 0, err
		}
		shares = append(shares, b)
	}
	return f.EvalLoss(context.Background(), model, shares...)
}
