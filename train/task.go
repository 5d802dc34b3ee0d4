package train

import (
	"fmt"
	"strings"

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
	// shapes is a training batch on shapes alone, which the plan
	// predicts the peak over (see shapesOf).
	shapes data.Batch
	// units counts what a batch trains on for throughput: tokens or images.
	units int
	unit  string
	// about says what the data is, once before training (Notifier).
	about string
	// notes are warned once before training: files the data left out.
	notes []string
	// arch is the HF config of a model started from an HF folder.
	arch *hf.Config
}

// newTask is c's model on its data: a language model on text, any other
// on the dataset its spec bundles.
func newTask(c Config) (*task, error) {
	spec, err := models.Lookup(c.Model)
	if err != nil {
		return nil, err
	}
	switch {
	case spec.LM != nil:
		return c.textTask()
	case spec.Data != nil:
		return &task{
			build:  spec.New,
			batch:  func(step uint64) data.Batch { return spec.Data(c.Seed, c.BatchSize, step) },
			val:    func(i int) data.Batch { return spec.Data(c.Seed+1, c.BatchSize, uint64(i)) },
			shapes: sampleShapes(spec.Data(c.Seed, 1, 0), c.BatchSize),
			units:  c.BatchSize, unit: spec.Unit, seed: c.Seed,
		}, nil
	}
	trainable := models.NamesWhere(func(s models.Spec) bool { return s.LM != nil || s.Data != nil })
	return nil, fmt.Errorf("model %q has no bundled dataset to train on (%s do; it is for weft parity and weft bench)", c.Model, strings.Join(trainable, ", "))
}

// textTask is c's language model on the Go corpus or c's text.
func (c Config) textTask() (*task, error) {
	tok, err := c.tokenizer()
	if err != nil {
		return nil, err
	}
	build, arch, err := c.languageModel(tok.VocabSize())
	if err != nil {
		return nil, err
	}
	trainIDs, valIDs, about, notes, err := c.gptTokens(tok)
	if err != nil {
		return nil, err
	}
	// A sampler per call: ranks draw the same batches concurrently,
	// each keeping its share (data.Batch.Share).
	draw := func(tokens data.Tokens, seed, pos uint64) data.Batch {
		s := data.NewTokenSampler(tokens, c.BatchSize, c.GPT.Context, seed)
		s.Seek(pos)
		return s.Next()
	}
	return &task{
		build:  build,
		batch:  func(step uint64) data.Batch { return draw(trainIDs, c.Seed, step) },
		val:    func(i int) data.Batch { return draw(valIDs, c.Seed+1, uint64(i)) },
		shapes: data.Batch{Shape: []int{c.BatchSize, c.GPT.Context}},
		units:  c.BatchSize * c.GPT.Context, unit: "tokens", seed: c.Seed, about: about, notes: notes, arch: arch,
	}, nil
}

// gptTokens are the training and validation ids gpt reads: the Go corpus
// or, with Data, the user's text encoded by tok.
// about says what of the user's text was read.
func (c Config) gptTokens(tok data.Tokenizer) (train, val data.Tokens, about string, notes []string, err error) {
	if c.Data == "" {
		corpus, err := data.LoadGoCorpus(data.CorpusConfig{MaxBytes: c.CorpusBytes, Part: c.CorpusPart})
		if err != nil {
			return data.Tokens{}, data.Tokens{}, "", nil, err
		}
		return corpus.Train, corpus.Val, "", nil, nil
	}
	text, err := data.LoadText(data.TextConfig{Path: c.Data, Tokenizer: tok, ValFraction: c.ValFraction})
	if err != nil {
		return data.Tokens{}, data.Tokens{}, "", nil, err
	}
	for i, ids := range []data.Tokens{text.Train, text.Val} {
		if ids.Len() <= c.GPT.Context {
			return data.Tokens{}, data.Tokens{}, "", nil, fmt.Errorf("data %s gives %d %s tokens (val fraction %g); a gpt context of %d needs more: give more text, a shorter context or another val fraction",
				c.Data, ids.Len(), []string{"training", "validation"}[i], c.ValFraction, c.GPT.Context)
		}
	}
	if n := len(text.Skipped); n > 0 {
		notes = append(notes, fmt.Sprintf("data: left out %d file(s) that are not UTF-8 text, first %s", n, text.Skipped[0]))
	}
	return text.Train, text.Val, tokensRead(len(text.Files), text.Train, text.Val, text.Bytes), notes, nil
}

// tokensRead is the line that says what a run reads: files, bytes of
// text, tokens and the memory they take.
func tokensRead(files int, train, val data.Tokens, textBytes int) string {
	return fmt.Sprintf("data: %d files, %.1f MB of text: %d training and %d validation tokens of %d ids, %d byte(s) each (%.1f MB)",
		files, float64(textBytes)/1e6, train.Len(), val.Len(), train.Vocab(), train.Width(), float64(train.Bytes()+val.Bytes())/1e6)
}

// newModel builds the model with its initial weights (the same on every
// rank: the seed decides them).
func (t *task) newModel() models.Model { return t.build(nn.NewInit(t.seed)) }

// metaModel builds the model on shapes alone, for its plan.
func (t *task) metaModel() models.Model { return t.build(nn.Meta(t.seed)) }
