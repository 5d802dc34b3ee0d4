package hf

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/tensor"
)

// Files of a PEFT adapter folder.
const (
	AdapterConfigFile  = "adapter_config.json"
	AdapterWeightsFile = "adapter_model.safetensors"
)

// LoRA is a model's set of LoRA adapters, all of one rank and alpha.
type LoRA struct {
	Rank  int     // 8
	Alpha float64 // 16
	// Base is the base_model_name_or_path PEFT loads the adapters onto: a
	// hub name or a model folder.
	Base     string
	Adapters []Adapter
}

// Adapter is the LoRA adapter of one Linear.
type Adapter struct {
	Module string         // weft's module path, "blocks.0.qkv"
	A, B   *tensor.Tensor // [rank, in], [out, rank]
}

// AdapterConfig is PEFT's adapter_config.json for LoRA, with PEFT's field
// names (LoraConfig).
type AdapterConfig struct {
	PeftType      string   `json:"peft_type"`               // "LORA"
	TaskType      string   `json:"task_type"`               // "CAUSAL_LM"
	BaseModel     string   `json:"base_model_name_or_path"` // "gpt2" or a folder
	R             int      `json:"r"`                       // 8
	LoraAlpha     float64  `json:"lora_alpha"`              // 16
	LoraDropout   float64  `json:"lora_dropout"`            // 0
	TargetModules []string `json:"target_modules"`          // ["transformer.h.0.attn.c_attn"]
	// FanInFanOut says the adapted layers store their weights [in, out]
	// (GPT-2's Conv1D): PEFT then adds (B·A)ᵀ to them.
	FanInFanOut   bool   `json:"fan_in_fan_out"`
	Bias          string `json:"bias"` // "none": no bias trains
	InferenceMode bool   `json:"inference_mode"`
}

// SaveAdapters writes l, the adapters of m, to dir in PEFT's layout:
// adapter_config.json and adapter_model.safetensors, whose tensors
// "base_model.model.<HF module>.lora_A.weight" (A [rank, in]) and
// ".lora_B.weight" (B [out, rank]) are float32, as PeftModel.from_pretrained
// reads them onto m's HF model (Save's layout, format "" for m's own).
func SaveAdapters(dir, format string, m models.Model, l LoRA) error {
	lay, _, err := layoutOf(m, format)
	if err != nil {
		return err
	}
	if len(l.Adapters) == 0 {
		return fmt.Errorf("hf: no LoRA adapters to save")
	}
	cfg := AdapterConfig{PeftType: "LORA", TaskType: "CAUSAL_LM", BaseModel: l.Base, R: l.Rank, LoraAlpha: l.Alpha,
		FanInFanOut: lay.format == "gpt2", Bias: "none", InferenceMode: true}
	var tensors []checkpoint.Tensor
	for _, a := range l.Adapters {
		weight, _ := lay.name(a.Module + ".weight")
		module := strings.TrimSuffix(weight, ".weight")
		cfg.TargetModules = append(cfg.TargetModules, module)
		for _, part := range []struct {
			name string
			t    *tensor.Tensor
		}{{"lora_A", a.A}, {"lora_B", a.B}} {
			t := part.t.To(dtype.F32)
			tensors = append(tensors, checkpoint.Tensor{Name: "base_model.model." + module + "." + part.name + ".weight", DType: dtype.F32, Shape: t.Shape(), Data: t.Data()})
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	if err := checkpoint.WriteSafetensors(filepath.Join(dir, AdapterWeightsFile), tensors, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	return writeJSON(filepath.Join(dir, AdapterConfigFile), cfg)
}

// writeJSON writes v to path, indented, with a final newline.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	return nil
}
