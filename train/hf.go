package train

import (
	"fmt"
	"strings"

	"github.com/weftml/weft/models"
	"github.com/weftml/weft/models/hf"
	"github.com/weftml/weft/nn"
)

// languageModel returns what builds the run's language model over vocab
// token ids (its tokenizer's): the gpt or llama of its sizes, or, when
// InitFrom is an HF model folder (it holds a config.json), the model that
// folder describes (arch, its config), which must take the tokenizer's ids
// and the run's context.
func (c Config) languageModel(vocabSize int) (build func(init *nn.Init) models.Model, arch *hf.Config, err error) {
	if c.InitFrom == "" || !hf.IsModelDir(c.InitFrom) {
		spec, err := languageSpec(c.Model)
		if err != nil {
			return nil, nil, err
		}
		size := c.gptConfig(vocabSize)
		return func(init *nn.Init) models.Model { return spec.LM(init, size) }, nil, nil
	}
	cfg, err := hf.ReadConfig(c.InitFrom)
	if err != nil {
		return nil, nil, fmt.Errorf("init from %s: %w", c.InitFrom, err)
	}
	if build, err = cfg.Builder(); err != nil {
		return nil, nil, fmt.Errorf("init from %s: %w", c.InitFrom, err)
	}
	var vocab, context int
	switch m := build(nn.Meta(0)).(type) {
	case *models.GPT:
		vocab, context = m.Config().Vocab, m.Config().Context
	case *models.Llama:
		vocab, context = m.Config().Vocab, m.Config().Context
	}
	if vocab < vocabSize || context < c.GPT.Context {
		return nil, nil, fmt.Errorf("init from %s: its model takes %d token ids and %d positions; the run's tokenizer needs %d ids and its context %d positions",
			c.InitFrom, vocab, context, vocabSize, c.GPT.Context)
	}
	return build, &cfg, nil
}

// languageModel returns what builds the model m's run trained: the HF
// config's model it started from, recorded in the manifest, or the gpt or
// llama of its sizes.
func (m *Manifest) languageModel() (func(init *nn.Init) models.Model, error) {
	if m.Config.HF != nil {
		return m.Config.HF.Builder()
	}
	if _, err := languageSpec(m.Config.Model); err != nil {
		return nil, fmt.Errorf("the run trained %s: %w", m.Config.Model, err)
	}
	tok, err := m.Config.tokenizer()
	if err != nil {
		return nil, err
	}
	build, _, err := m.Config.languageModel(tok.VocabSize())
	return build, err
}

// languageSpec is the spec of the language model called name; any other
// model is an error naming the language models, the ones that train on
// text, sample and export.
func languageSpec(name string) (models.Spec, error) {
	spec, err := models.Lookup(name)
	if err == nil && spec.LM == nil {
		lms := models.NamesWhere(func(s models.Spec) bool { return s.LM != nil })
		err = fmt.Errorf("%s is not a language model (those are %s)", name, strings.Join(lms, ", "))
	}
	return spec, err
}
