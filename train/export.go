package train

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/models/hf"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/quant"
)

// ExportFormats are the layouts Export writes: HF's model layouts
// (hf.Formats) and peft, a run's LoRA adapters alone.
var ExportFormats = append(slices.Clone(hf.Formats), "peft")

// restore rebuilds the language model of run (a run folder) as it trained
// it, under its precision and with its LoRA adapters, and loads the
// latest checkpoint into it. A checkpoint holds no frozen (quantized)
// weights: they are drawn from the run's seed, or read from its
// --init-from again, and quantized as training did.
func restore(run string) (*Manifest, models.Model, *fabric.Fabric, error) {
	m, ckpt, err := ReadManifest(filepath.Join(run, "checkpoints"))
	if err != nil {
		return nil, nil, nil, err
	}
	c := m.Config
	build, err := m.languageModel()
	if err != nil {
		return nil, nil, nil, err
	}
	pol, scaling, err := c.policy(nil)
	if err == nil {
		pol, err = c.withLoRA(pol)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	f, err := fabric.New(fabric.Config{Policy: pol, LossScaling: scaling})
	if err != nil {
		return nil, nil, nil, err
	}
	lm := build(nn.NewInit(c.Seed))
	if err := frozenFromInit(f, c, lm, build, pol, scaling); err != nil {
		return nil, nil, nil, err
	}
	opt, err := optim.NewAdamW(nn.Parameters(lm), c.adamW())
	if err != nil {
		return nil, nil, nil, err
	}
	if err := f.Setup(lm, opt); err != nil {
		return nil, nil, nil, err
	}
	opt.SetParams(nn.Parameters(lm)) // with the adapters, whose moments Load restores
	if _, err := f.Load(ckpt, fabric.LoadOptions{}); err != nil {
		return nil, nil, nil, err
	}
	return m, lm, f, nil
}

// frozenFromInit reads into lm, the model c trained built afresh, the
// weights of c's --init-from, if it has one and c's precision freezes
// weights: those the checkpoints lack.
func frozenFromInit(f *fabric.Fabric, c Config, lm models.Model, build func(*nn.Init) models.Model, pol precision.Policy, scaling precision.LossScaling) error {
	if c.InitFrom == "" {
		return nil
	}
	plan, err := fabric.MakePlan(build(nn.Meta(c.Seed)), pol, scaling, "single", 1)
	if err != nil || plan.BytesPerRank.Frozen == 0 {
		return err
	}
	if err := loadWeights(f, c.InitFrom, lm); err != nil {
		return fmt.Errorf("the run's frozen (quantized) weights are in no checkpoint; they are read again from its --init-from: %w", err)
	}
	return nil
}

// Export writes the latest weights of run (a run folder of a gpt or llama)
// to out. Formats gpt2 and llama (or "", the run's own) write an HF model
// folder, config.json and model.safetensors, which transformers (or
// testdata/hf/oracle.py) loads and --init-from takes back: quantized
// weights dequantized, LoRA adapters merged into them (W + (alpha/r)·B·A).
// Format peft writes the adapters alone in PEFT's layout
// (adapter_config.json, adapter_model.safetensors), with the model they
// adapt, its weights dequantized, in out/base, which
// base_model_name_or_path names.
func Export(run, format, out string) error {
	if format != "" && !slices.Contains(ExportFormats, format) {
		return fmt.Errorf("export: format %q: accepted are %s", format, strings.Join(ExportFormats, ", "))
	}
	m, lm, _, err := restore(run)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if format != "peft" {
		quant.ToFloat(lm, true)
		if err := hf.Save(out, format, lm); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		return nil
	}
	adapters := quant.Adapters(lm)
	if len(adapters) == 0 {
		return fmt.Errorf("export: run %s trained no LoRA adapters (--lora) for --format peft; export its weights without --format peft", run)
	}
	base, err := filepath.Abs(filepath.Join(out, "base"))
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	quant.ToFloat(lm, false)
	if err := hf.Save(base, "", lm); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	l := hf.LoRA{Rank: m.Config.LoRA.Rank, Alpha: m.Config.LoRA.Alpha, Base: base}
	for _, a := range adapters {
		l.Adapters = append(l.Adapters, hf.Adapter{Module: a.Module, A: a.A, B: a.B})
	}
	if err := hf.SaveAdapters(out, "", lm, l); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return nil
}
