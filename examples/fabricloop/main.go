// Command fabricloop is a Lightning Fabric training loop in weft: a small
// gpt learns a text from a data loader, with gradient accumulation, a
// warmup-cosine learning rate and a CSV log; it saves a checkpoint
// halfway, and a fresh fabric loads it and trains on.
package main

import (
	"context"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/weftml/weft/data"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
)

var (
	steps    = 40
	text     = strings.Repeat("the quick brown fox jumps over the lazy dog. ", 40)
	schedule = optim.Cosine{Max: 3e-3, Min: 3e-4, Warmup: 5, Decay: steps}
)

func main() {
	dir, err := os.MkdirTemp("", "fabricloop")
	logger := fabric.NewCSV(os.Stdout, "loss", "lr")
	for from := 0; err == nil && from < steps; from += steps / 2 { // the second half resumes the first's checkpoint
		err = train(context.Background(), dir, from, from+steps/2, logger)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// train runs steps [from, to) with batches of 8 windows of 16 bytes in 2
// micro-batches, resuming dir/ckpt unless from is 0, and saves dir/ckpt.
func train(ctx context.Context, dir string, from, to int, logger fabric.Logger) error {
	p, err := precision.Parse("bf16-mixed", precision.Options{})
	if err != nil {
		return err
	}
	f, err := fabric.New(fabric.Config{
		Precision:    p,
		Seed:         1337,
		Accumulation: fabric.Accumulation{MicroBatches: 2},
		Loggers:      []fabric.Logger{logger},
	})
	if err != nil {
		return err
	}
	model := models.NewGPT(f.InitModule(false), models.GPTConfig{Vocab: 256, Context: 16, Width: 32, Heads: 2, Layers: 2})
	opt, err := optim.NewAdamW(nn.Parameters(model), optim.AdamWConfig{LR: schedule.LR(from), Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	if err == nil {
		err = f.Setup(model, opt)
	}
	if err == nil && from > 0 {
		_, err = f.Load(filepath.Join(dir, "ckpt"), fabric.LoadOptions{})
	}
	if err != nil {
		return err
	}
	tokens, err := data.Encode(data.Bytes{}, text)
	if err != nil {
		return err
	}
	sampler := data.NewTokenSampler(tokens, 8, 16, 1)
	loader := f.SetupDataLoader(fabric.DatasetFunc(func(i uint64) (data.Batch, error) { sampler.Seek(i); return sampler.Next(), nil }))
	loader.Seek(uint64(from))
	for step := from; step < to; step++ {
		opt.LR = schedule.LR(step)
		b, err := loader.Next()
		if err != nil {
			return err
		}
		res, err := f.TrainStep(ctx, model, b)
		if err != nil {
			return err
		}
		if err := f.LogDict(step, fabric.Field{Name: "loss", Value: res.Loss}, fabric.Field{Name: "lr", Value: opt.LR}); err != nil {
			return err
		}
	}
	return f.Save(ctx, filepath.Join(dir, "ckpt"), fabric.SaveOptions{Step: to})
}
