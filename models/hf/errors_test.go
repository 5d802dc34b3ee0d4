package hf_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftml/weft/models"
	"github.com/weftml/weft/models/hf"
	"github.com/weftml/weft/nn"
)

// TestLoadErrors: a folder whose config.json does not match its weights,
// or asks for what weft's models lack, is refused with a one-line error
// naming the tensor or the setting.
func TestLoadErrors(t *testing.T) {
	gpt := models.NewGPT(nn.NewInit(1), models.GPTConfig{Vocab: 20, Context: 8, Width: 16, Heads: 2, Layers: 2, TanhGELU: true})
	llama := models.NewLlama(nn.NewInit(1), models.LlamaConfig{Vocab: 20, Context: 8, Width: 16, Heads: 2, Layers: 1, Hidden: 24, NormEps: 1e-5, RopeTheta: 10000})
	for _, c := range []struct {
		name   string
		model  models.Model
		format string
		edit   map[string]any // config.json fields to overwrite
		want   string
	}{
		{"more layers than weights", gpt, "gpt2", map[string]any{"n_layer": 3}, "has no tensor transformer.h.2.ln_1.weight"},
		{"fewer layers than weights", gpt, "gpt2", map[string]any{"n_layer": 1}, "holds transformer.h.1."},
		{"shape", gpt, "gpt2", map[string]any{"n_positions": 4}, "transformer.wpe.weight has shape [8 16], the config's model wants [4 16]"},
		{"tied config, untied weights", gpt, "gpt2", map[string]any{"tie_word_embeddings": nil}, ""}, // HF's default ties: lm_head.weight is ignored
		{"activation", gpt, "gpt2", map[string]any{"activation_function": "relu"}, `activation_function "relu" is not supported`},
		{"n_inner", gpt, "gpt2", map[string]any{"n_inner": 10}, "n_inner 10 is not supported"},
		{"model type", gpt, "gpt2", map[string]any{"model_type": "bert"}, `model_type "bert" is not supported (accepted: gpt2, llama)`},
		{"zero heads", gpt, "gpt2", map[string]any{"n_head": 0}, "n_head 0: must be positive"},
		{"key/value heads not dividing heads", llama, "llama", map[string]any{"num_key_value_heads": 3}, "num_key_value_heads 3 (it must divide num_attention_heads 2)"},
		{"fewer key/value heads than the weights", llama, "llama", map[string]any{"num_key_value_heads": 1}, "self_attn.k_proj.weight has shape [16 16], the config's model wants [8 16]"},
		{"rope scaling", llama, "llama", map[string]any{"rope_scaling": map[string]any{"type": "linear", "factor": 2}}, "rope_scaling"},
		{"activation", llama, "llama", map[string]any{"hidden_act": "gelu"}, `hidden_act "gelu"`},
		{"odd head width", llama, "llama", map[string]any{"hidden_size": 18, "num_attention_heads": 6, "num_key_value_heads": 6}, "must be even for rotary embeddings"},
	} {
		t.Run(c.format+"/"+c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := hf.Save(dir, c.format, c.model); err != nil {
				t.Fatal(err)
			}
			editConfig(t, dir, c.edit)
			_, err := hf.Open(dir)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Open: %v", err)
			case c.want == "":
			case err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n"):
				t.Fatalf("Open: %v; want one line containing %q", err, c.want)
			}
		})
	}
}

// TestSaveErrors: a model exports only in its own layout.
func TestSaveErrors(t *testing.T) {
	gpt := models.NewGPT(nn.NewInit(1), models.ReferenceGPT)
	if err := hf.Save(t.TempDir(), "llama", gpt); err == nil || !strings.Contains(err.Error(), "a gpt exports in the gpt2 layout") {
		t.Errorf("gpt as llama: %v", err)
	}
	mlp, _ := models.New("mlp", 1)
	if err := hf.Save(t.TempDir(), "gpt2", mlp); err == nil || !strings.Contains(err.Error(), "hf: mlp has no HF layout; HF export/import supports gpt and llama") || strings.Contains(err.Error(), "*") {
		t.Errorf("mlp: %v", err)
	}
}

// editConfig overwrites fields of dir's config.json (nil deletes one).
func editConfig(t *testing.T, dir string, edit map[string]any) {
	t.Helper()
	path := filepath.Join(dir, hf.ConfigFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	for k, v := range edit {
		if v == nil {
			delete(cfg, k)
		} else {
			cfg[k] = v
		}
	}
	if b, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
