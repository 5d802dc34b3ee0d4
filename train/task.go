package train

import (
	"fmt"

	"github.com/weftml/weft/data"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/models/hf"
	"github.com/weftml/weft/nn"
)

// task is one model on its bundled dataset. Batches are pure functions of
// the step (or validation index), so a resumed run sees the same data.
type task struct {
	// build builds the model from init: with its initial weights, or on
	// shapes alone from nn.Meta.
	build func(init *nn.Init) models.Model
	seed  uint64
	batch func(step uint64) data.Batch
	val   func(i int) data.Batch
	// units counts what a batch trains on for throughput: tokens or images.
	units int
	unit  string
	// arch is the HF config of a model started from an HF folder.
	arch *hf.Config
}

func newTask(c Config) (*task, error) {
	switch c.Model {
	case "gpt", "llama":
		build, arch, err := c.languageModel()
		if err != nil {
			return nil, err
		}
		corpus, err := data.LoadGoCorpus(data.CorpusConfig{MaxBytes: c.CorpusBytes, Part: c.CorpusPart})
		if err != nil {
			return nil, err
		}
		// A sampler per call: ranks draw the same batches concurrently.
		draw := func(tokens []int, seed, pos uint64) data.Batch {
			s := data.NewTokenSampler(tokens, c.BatchSize, c.GPT.Context, seed)
			s.Seek(pos)
			return s.Next()
		}
		return &task{
			build: build,
			batch: func(step uint64) data.Batch { return draw(corpus.Train, c.Seed, step) },
			val:   func(i int) data.Batch { return draw(corpus.Val, c.Seed+1, uint64(i)) },
			units: c.BatchSize * c.GPT.Context, unit: "tokens", seed: c.Seed, arch: arch,
		}, nil
	case "cnn":
		cfg := data.GlyphConfig{Seed: c.Seed}
		valCfg := data.GlyphConfig{Seed: c.Seed + 1}
		return &task{
			build: func(init *nn.Init) models.Model { return models.NewCNN(init) },
			batch: func(step uint64) data.Batch { return data.GlyphBatch(cfg, c.BatchSize, step) },
			val:   func(i int) data.Batch { return data.GlyphBatch(valCfg, c.BatchSize, uint64(i)) },
			units: c.BatchSize, unit: "images", seed: c.Seed,
		}, nil
	case "hybrid":
		h := models.DefaultHybrid
		cfg := data.TextImageConfig{Height: h.Height, Width: h.Width, Chars: h.Chars, Seed: c.Seed}
		valCfg := cfg
		valCfg.Seed++
		return &task{
			build: func(init *nn.Init) models.Model { return models.NewHybrid(init, h) },
			batch: func(step uint64) data.Batch { return hybridBatch(cfg, c.BatchSize, step, h.Alphabet) },
			val:   func(i int) data.Batch { return hybridBatch(valCfg, c.BatchSize, uint64(i), h.Alphabet) },
			units: c.BatchSize, unit: "images", seed: c.Seed,
		}, nil
	}
	return nil, fmt.Errorf("model %q has no bundled dataset to train on (gpt, llama, cnn, hybrid do; mlp is for weft parity)", c.Model)
}

// newModel builds the model with its initial weights (the same on every
// rank: the seed decides them).
func (t *task) newModel() models.Model { return t.build(nn.NewInit(t.seed)) }

// metaModel builds the model on shapes alone, for its plan.
func (t *task) metaModel() models.Model { return t.build(nn.Meta(t.seed)) }

// hybridBatch turns rendered text into a decoder batch: inputs are a start
// token (id start) then the first T-1 characters, targets all T characters.
func hybridBatch(cfg data.TextImageConfig, n int, step uint64, start int) data.Batch {
	images, text := data.TextImageBatch(cfg, n, step)
	t := len(text[0])
	b := data.Batch{X: images, Shape: []int{n, t}}
	for _, chars := range text {
		b.Tokens = append(append(b.Tokens, start), chars[:t-1]...)
		b.Targets = append(b.Targets, chars...)
	}
	return b
}
