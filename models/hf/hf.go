// Package hf reads and writes models in Hugging Face's layouts: a folder
// holding config.json (HF's field names) and model.safetensors, for GPT-2
// (weft's gpt with GPT-2's options) and Llama (weft's llama), so that a
// checkpoint trained elsewhere fine-tunes in weft and a weft model loads
// in PyTorch.
//
// The names and layouts follow transformers' GPT2LMHeadModel and
// LlamaForCausalLM. GPT-2 stores its projections as Conv1D weights
// [in, out], the transpose of a Linear's [out, in]; Llama's are Linear
// weights, with q and k rows in the order of HF's rotate_half rotary
// convention, which weft's rotary embeddings follow, so they load as they
// are.
package hf

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
)

// Files of a model folder.
const (
	ConfigFile  = "config.json"
	WeightsFile = "model.safetensors"
)

// Formats are the layouts this package reads and writes.
var Formats = []string{"gpt2", "llama"}

// Config is a config.json of either layout, with HF's field names. Fields
// of the other layout stay zero.
type Config struct {
	ModelType     string   `json:"model_type"`              // "gpt2" or "llama"
	Architectures []string `json:"architectures,omitempty"` // ["GPT2LMHeadModel"]
	VocabSize     int      `json:"vocab_size"`              // 50257
	// TieWordEmbeddings makes the head the token embedding; absent, HF's
	// defaults hold: true for GPT-2, false for Llama.
	TieWordEmbeddings *bool `json:"tie_word_embeddings,omitempty"`

	// GPT-2.
	NLayer             int     `json:"n_layer,omitempty"`             // 12
	NEmbd              int     `json:"n_embd,omitempty"`              // 768
	NHead              int     `json:"n_head,omitempty"`              // 12
	NPositions         int     `json:"n_positions,omitempty"`         // 1024
	NInner             *int    `json:"n_inner,omitempty"`             // null: 4·n_embd
	LayerNormEpsilon   float64 `json:"layer_norm_epsilon,omitempty"`  // 1e-5
	ActivationFunction string  `json:"activation_function,omitempty"` // "gelu_new" (tanh) or "gelu" (erf)

	// Llama.
	HiddenSize            int             `json:"hidden_size,omitempty"`             // 4096
	NumHiddenLayers       int             `json:"num_hidden_layers,omitempty"`       // 32
	NumAttentionHeads     int             `json:"num_attention_heads,omitempty"`     // 32
	NumKeyValueHeads      int             `json:"num_key_value_heads,omitempty"`     // 8: grouped-query attention (0: as many as heads)
	IntermediateSize      int             `json:"intermediate_size,omitempty"`       // 11008
	RMSNormEps            float64         `json:"rms_norm_eps,omitempty"`            // 1e-6
	RopeTheta             float64         `json:"rope_theta,omitempty"`              // 10000
	MaxPositionEmbeddings int             `json:"max_position_embeddings,omitempty"` // 4096
	HiddenAct             string          `json:"hidden_act,omitempty"`              // "silu"
	HeadDim               int             `json:"head_dim,omitempty"`                // hidden_size/num_attention_heads
	RopeScaling           json.RawMessage `json:"rope_scaling,omitempty"`            // null: plain rotary embeddings
	AttentionBias         bool            `json:"attention_bias,omitempty"`          // false
	MLPBias               bool            `json:"mlp_bias,omitempty"`                // false
}

// IsModelDir reports whether dir holds a config.json: an HF model folder
// rather than a weft run.
func IsModelDir(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ConfigFile))
	return err == nil
}

// ReadConfig reads dir's config.json.
func ReadConfig(dir string) (Config, error) {
	path := filepath.Join(dir, ConfigFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("hf: %w", err)
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, fmt.Errorf("hf: %s: %w", path, err)
	}
	return c, nil
}

// tied is tie_word_embeddings with HF's default for the layout.
func (c Config) tied() bool {
	if c.TieWordEmbeddings != nil {
		return *c.TieWordEmbeddings
	}
	return c.ModelType == "gpt2"
}

// GPT returns the weft gpt of a GPT-2 config, or why it has none.
func (c Config) GPT() (models.GPTConfig, error) {
	if c.ModelType != "gpt2" {
		return models.GPTConfig{}, fmt.Errorf("hf: model_type %q is not gpt2", c.ModelType)
	}
	g := models.GPTConfig{Vocab: c.VocabSize, Context: c.NPositions, Width: c.NEmbd, Heads: c.NHead, Layers: c.NLayer,
		TiedHead: c.tied(), NormEps: c.LayerNormEpsilon}
	switch c.ActivationFunction {
	case "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "": // "" is HF's default, gelu_new
		g.TanhGELU = true
	case "gelu":
	default:
		return g, fmt.Errorf("hf: gpt2 activation_function %q is not supported (accepted: gelu_new, gelu_pytorch_tanh, gelu_fast, gelu)", c.ActivationFunction)
	}
	if c.NInner != nil && *c.NInner != 4*c.NEmbd {
		return g, fmt.Errorf("hf: gpt2 n_inner %d is not supported (weft's gpt has 4·n_embd = %d)", *c.NInner, 4*c.NEmbd)
	}
	if c.LayerNormEpsilon == 0 {
		g.NormEps = 1e-5
	}
	return g, positive("gpt2", map[string]int{"vocab_size": c.VocabSize, "n_positions": c.NPositions, "n_embd": c.NEmbd, "n_head": c.NHead, "n_layer": c.NLayer}, c.NEmbd, c.NHead)
}

// Llama returns the weft llama of a Llama config, or why it has none.
func (c Config) Llama() (models.LlamaConfig, error) {
	if c.ModelType != "llama" {
		return models.LlamaConfig{}, fmt.Errorf("hf: model_type %q is not llama", c.ModelType)
	}
	l := models.LlamaConfig{Vocab: c.VocabSize, Context: c.MaxPositionEmbeddings, Width: c.HiddenSize, Heads: c.NumAttentionHeads,
		Layers: c.NumHiddenLayers, Hidden: c.IntermediateSize, NormEps: c.RMSNormEps, RopeTheta: c.RopeTheta, TiedHead: c.tied(), KVHeads: c.NumKeyValueHeads}
	if l.NormEps == 0 {
		l.NormEps = 1e-6
	}
	if l.RopeTheta == 0 {
		l.RopeTheta = 10000
	}
	var unsupported []string
	if c.NumKeyValueHeads < 0 || c.NumKeyValueHeads > 0 && c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		unsupported = append(unsupported, fmt.Sprintf("num_key_value_heads %d (it must divide num_attention_heads %d)", c.NumKeyValueHeads, c.NumAttentionHeads))
	}
	if c.HiddenAct != "" && c.HiddenAct != "silu" {
		unsupported = append(unsupported, fmt.Sprintf("hidden_act %q (weft has silu)", c.HiddenAct))
	}
	if s := strings.TrimSpace(string(c.RopeScaling)); s != "" && s != "null" {
		unsupported = append(unsupported, "rope_scaling "+s+" (weft has plain rotary embeddings)")
	}
	if c.NumAttentionHeads > 0 && c.HeadDim != 0 && c.HeadDim != c.HiddenSize/c.NumAttentionHeads {
		unsupported = append(unsupported, fmt.Sprintf("head_dim %d (weft has hidden_size/num_attention_heads = %d)", c.HeadDim, c.HiddenSize/c.NumAttentionHeads))
	}
	if c.AttentionBias || c.MLPBias {
		unsupported = append(unsupported, "attention_bias or mlp_bias (weft's llama has no biases)")
	}
	if len(unsupported) > 0 {
		return l, fmt.Errorf("hf: llama config not supported: %s", strings.Join(unsupported, "; "))
	}
	err := positive("llama", map[string]int{"vocab_size": c.VocabSize, "max_position_embeddings": c.MaxPositionEmbeddings, "hidden_size": c.HiddenSize,
		"num_attention_heads": c.NumAttentionHeads, "num_hidden_layers": c.NumHiddenLayers, "intermediate_size": c.IntermediateSize}, c.HiddenSize, c.NumAttentionHeads)
	if err == nil && c.HiddenSize/c.NumAttentionHeads%2 != 0 {
		err = fmt.Errorf("hf: llama head width %d (hidden_size/num_attention_heads) must be even for rotary embeddings", c.HiddenSize/c.NumAttentionHeads)
	}
	return l, err
}

// positive checks that every size is positive and width a multiple of heads.
func positive(layout string, sizes map[string]int, width, heads int) error {
	var bad []string
	for _, name := range slices.Sorted(maps.Keys(sizes)) {
		if sizes[name] < 1 {
			bad = append(bad, fmt.Sprintf("%s %d", name, sizes[name]))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("hf: %s config: %s: must be positive", layout, strings.Join(bad, ", "))
	}
	if width%heads != 0 {
		return fmt.Errorf("hf: %s config: width %d is not a multiple of %d heads", layout, width, heads)
	}
	return nil
}

// Builder returns what builds the model of c (with initial weights from
// init, or on shapes alone from nn.Meta), or why c cannot be built.
func (c Config) Builder() (func(init *nn.Init) models.Model, error) {
	switch c.ModelType {
	case "gpt2":
		g, err := c.GPT()
		if err != nil {
			return nil, err
		}
		return func(init *nn.Init) models.Model { return models.NewGPT(init, g) }, nil
	case "llama":
		l, err := c.Llama()
		if err != nil {
			return nil, err
		}
		return func(init *nn.Init) models.Model { return models.NewLlama(init, l) }, nil
	}
	return nil, fmt.Errorf("hf: model_type %q is not supported (accepted: %s)", c.ModelType, strings.Join(Formats, ", "))
}

// Open builds the model a folder describes and loads its weights.
func Open(dir string) (models.Model, error) {
	c, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	build, err := c.Builder()
	if err != nil {
		return nil, err
	}
	m := build(nn.NewInit(0))
	return m, LoadWeights(dir, m)
}
