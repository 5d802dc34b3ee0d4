package hf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// layout names a model's parameters in one HF format.
type layout struct {
	format string
	// top maps weft's modules outside the blocks to HF's, and block a
	// block's children to HF's modules inside layer N (layer + "N.").
	top, block map[string]string
	layer      string
	// prefix goes before every name but lm_head's ("transformer." for
	// GPT2LMHeadModel; files saved from GPT2Model have none).
	prefix string
	// conv1d are the block children stored as Conv1D weights [in, out].
	conv1d map[string]bool
	// ignored are the suffixes of buffers a file may hold besides the
	// weights (GPT-2's causal masks, Llama's inverse frequencies).
	ignored []string
}

var gpt2 = layout{
	format: "gpt2",
	top:    map[string]string{"tok": "wte", "pos": "wpe", "ln_f": "ln_f", "head": "lm_head"},
	block: map[string]string{"ln1": "ln_1", "qkv": "attn.c_attn", "proj": "attn.c_proj", "ln2": "ln_2",
		"fc": "mlp.c_fc", "out": "mlp.c_proj"},
	layer:   "h.",
	prefix:  "transformer.",
	conv1d:  map[string]bool{"qkv": true, "proj": true, "fc": true, "out": true},
	ignored: []string{".attn.bias", ".attn.masked_bias"},
}

var llama = layout{
	format: "llama",
	top:    map[string]string{"tok": "model.embed_tokens", "norm": "model.norm", "head": "lm_head"},
	block: map[string]string{"attn_norm": "input_layernorm", "q": "self_attn.q_proj", "k": "self_attn.k_proj",
		"v": "self_attn.v_proj", "o": "self_attn.o_proj", "mlp_norm": "post_attention_layernorm",
		"gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"},
	layer:   "model.layers.",
	ignored: []string{".rotary_emb.inv_freq"},
}

// layoutOf is the layout of m's kind in format ("" for its own), with the
// config.json that describes it.
func layoutOf(m models.Model, format string) (layout, Config, error) {
	switch m := m.(type) {
	case *models.GPT:
		if format != "" && format != "gpt2" {
			return layout{}, Config{}, fmt.Errorf("hf: a gpt exports in the gpt2 layout, not %q", format)
		}
		g := m.Config()
		act := "gelu"
		if g.TanhGELU {
			act = "gelu_new"
		}
		eps := g.NormEps
		if eps == 0 {
			eps = 1e-5
		}
		return gpt2, Config{ModelType: "gpt2", Architectures: []string{"GPT2LMHeadModel"}, VocabSize: g.Vocab, TieWordEmbeddings: &g.TiedHead,
			NLayer: g.Layers, NEmbd: g.Width, NHead: g.Heads, NPositions: g.Context, LayerNormEpsilon: eps, ActivationFunction: act}, nil
	case *models.Llama:
		if format != "" && format != "llama" {
			return layout{}, Config{}, fmt.Errorf("hf: a llama exports in the llama layout, not %q", format)
		}
		l := m.Config()
		return llama, Config{ModelType: "llama", Architectures: []string{"LlamaForCausalLM"}, VocabSize: l.Vocab, TieWordEmbeddings: &l.TiedHead,
			HiddenSize: l.Width, NumHiddenLayers: l.Layers, NumAttentionHeads: l.Heads, NumKeyValueHeads: l.KV(), IntermediateSize: l.Hidden,
			RMSNormEps: l.NormEps, RopeTheta: l.RopeTheta, MaxPositionEmbeddings: l.Context, HiddenAct: "silu"}, nil
	}
	return layout{}, Config{}, fmt.Errorf("hf: %s has no HF layout; HF export/import supports gpt and llama (formats %s)", strings.ToLower(nn.Kind(m)), strings.Join(Formats, ", "))
}

// name is the HF name of weft parameter path, and whether it is stored
// transposed (Conv1D).
func (l layout) name(path string) (string, bool) {
	parts := strings.Split(path, ".")
	leaf := parts[len(parts)-1]
	if parts[0] == "blocks" && len(parts) == 4 {
		return l.prefix + l.layer + parts[1] + "." + l.block[parts[2]] + "." + leaf, l.conv1d[parts[2]] && leaf == "weight"
	}
	module := l.top[strings.Join(parts[:len(parts)-1], ".")]
	if module == "lm_head" {
		return module + "." + leaf, false
	}
	return l.prefix + module + "." + leaf, false
}

// LoadWeights copies dir's model.safetensors into m's parameters (of any
// dtype), transposing Conv1D weights. Every parameter must be there with
// its shape, and every tensor of the file must be one of them or a buffer
// HF keeps beside them.
func LoadWeights(dir string, m models.Model) error {
	l, _, err := layoutOf(m, "")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, WeightsFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(dir, WeightsFile+".index.json")); err == nil {
			return fmt.Errorf("hf: %s holds a sharded checkpoint (model.safetensors.index.json); weft reads one model.safetensors", dir)
		}
	}
	f, err := checkpoint.ReadSafetensors(path)
	if err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	if l.format == "gpt2" {
		if _, ok := f.Tensor("wte.weight"); ok { // saved from GPT2Model
			l.prefix = ""
		}
	}
	used := map[string]bool{}
	for _, p := range nn.Parameters(m) {
		name, conv1d := l.name(p.Path)
		st, ok := f.Tensor(name)
		if !ok {
			return fmt.Errorf("hf: %s has no tensor %s (weft's %s)", path, name, p.Path)
		}
		used[name] = true
		want := p.Var.Value.Shape()
		if conv1d {
			want = []int{want[1], want[0]}
		}
		if !tensor.EqualShape(st.Shape, want) {
			return fmt.Errorf("hf: %s: %s has shape %v, the config's model wants %v", path, name, st.Shape, want)
		}
		t, err := tensor.FromBytes(st.DType, st.Data, st.Shape...)
		if err != nil {
			return fmt.Errorf("hf: %s: %s: %w", path, name, err)
		}
		if conv1d {
			t = tensor.Permute(t, 1, 0)
		}
		p.Var.Value.CopyFrom(t)
	}
	for _, name := range f.Names() {
		if !used[name] && !l.ignores(name) {
			return fmt.Errorf("hf: %s holds %s, which the %s model of %s does not have (does config.json match the weights?)", path, name, l.format, filepath.Join(dir, ConfigFile))
		}
	}
	return nil
}

// ignores reports whether name is a buffer the layout's files may hold,
// or a tied head's copy of the embedding.
func (l layout) ignores(name string) bool {
	for _, s := range l.ignored {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return name == "lm_head.weight"
}

// Save writes m to dir in format (gpt2 for a gpt, llama for a llama):
// config.json and model.safetensors with float32 weights, Conv1D weights
// transposed, and no lm_head.weight when the head is tied.
func Save(dir, format string, m models.Model) error {
	l, cfg, err := layoutOf(m, format)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	var tensors []checkpoint.Tensor
	for _, p := range nn.Parameters(m) {
		if p.Var.Value.IsMeta() {
			return fmt.Errorf("hf: %s has no values (a model built on shapes alone)", p.Path)
		}
		name, conv1d := l.name(p.Path)
		t := p.Var.Value.To(dtype.F32)
		if conv1d {
			t = tensor.Permute(t, 1, 0)
		}
		tensors = append(tensors, checkpoint.Tensor{Name: name, DType: dtype.F32, Shape: t.Shape(), Data: t.Data()})
	}
	// HF's loader takes the framework from the metadata.
	if err := checkpoint.WriteSafetensors(filepath.Join(dir, WeightsFile), tensors, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	return writeJSON(filepath.Join(dir, ConfigFile), cfg)
}
