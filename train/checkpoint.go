package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/models/hf"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// A run's checkpoints are folders checkpoints/step-NNNNNN, each one the
// fabric's (fabric.Fabric.Save: format weft-checkpoint/2) with this run's
// Config as the manifest's config; checkpoints/latest names the newest
// and is replaced by rename, so a crash never leaves it naming a
// half-written checkpoint.
const (
	latestFile     = "latest"
	keepCheckpoint = 2
)

// Manifest describes a checkpoint of a run: the fabric's manifest and the
// run's Config.
type Manifest struct {
	fabric.Manifest
	Config Config
}

type checkpointer struct {
	dir    string
	fabric *fabric.Fabric
	comm   comm.Communicator // every rank takes part in save and load
}

// save writes the checkpoint of step and makes it the latest; every rank
// calls it, and its collectives run under ctx. A failure (a full disk)
// leaves latest naming a complete checkpoint.
func (k *checkpointer) save(ctx context.Context, c Config, step int) (string, error) {
	dir, err := k.write(ctx, c, step)
	if err != nil {
		return "", fmt.Errorf("checkpoint of step %d failed, resume loads the latest complete one: %w", step, err)
	}
	return dir, nil
}

func (k *checkpointer) write(ctx context.Context, c Config, step int) (string, error) {
	name := fmt.Sprintf("step-%06d", step)
	final := filepath.Join(k.dir, name)
	if err := k.fabric.Save(ctx, final, fabric.SaveOptions{Step: step, Config: c}); err != nil {
		return "", err
	}
	if k.fabric.IsGlobalZero() {
		if err := checkpoint.WriteFileAtomic(filepath.Join(k.dir, latestFile), []byte(name+"\n")); err != nil {
			return "", err
		}
		if err := k.prune(); err != nil {
			return "", err
		}
	}
	if err := k.comm.Barrier(ctx); err != nil { // until rank 0 has published it
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	return final, nil
}

// prune removes all but the newest keepCheckpoint checkpoints.
func (k *checkpointer) prune() error {
	names, err := filepath.Glob(filepath.Join(k.dir, "step-*"))
	if err != nil {
		return err
	}
	sort.Strings(names)
	for len(names) > keepCheckpoint {
		if err := os.RemoveAll(names[0]); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		names = names[1:]
	}
	return nil
}

// load restores the latest checkpoint into the fabric's model, optimizer
// and precision state and returns the step to resume at and one note per
// conversion a changed precision, strategy or device count took. A
// changed model is an error.
func (k *checkpointer) load(c Config) (int, []string, error) {
	m, dir, err := ReadManifest(k.dir)
	if err != nil {
		return 0, nil, err
	}
	if m.Config.Model != c.Model || m.Config.GPT != c.GPT {
		return 0, nil, fmt.Errorf("resume: checkpoint %s holds model %s, this run is %s; resume with the checkpoint's model (or train into another --out)", dir, modelOf(m.Config), modelOf(c))
	}
	if was, is := m.Config.textSource(), c.textSource(); was != is {
		return 0, nil, fmt.Errorf("resume: checkpoint %s trained on %s, this run on %s", dir, was, is)
	}
	if !reflect.DeepEqual(m.Config.LoRA.Targets, c.LoRA.Targets) {
		return 0, nil, fmt.Errorf("resume: checkpoint %s trains LoRA adapters on %v, this run on %v", dir, m.Config.LoRA.Targets, c.LoRA.Targets)
	}
	loaded, err := k.fabric.Load(dir, fabric.LoadOptions{})
	if u := (*fabric.UnexpectedError)(nil); errors.As(err, &u) {
		// A precision that freezes weights (nf4, int8) holds them as codes,
		// not parameters: --init-from quantizes a run's weights instead.
		return 0, nil, fmt.Errorf("resume: checkpoint %s holds %d tensors this run's model has no parameter for (%s): under --precision %s start from its weights with --init-from %s and another --out", dir, len(u.Names), u.FirstNames(), c.Precision, filepath.Dir(k.dir))
	}
	if err != nil {
		return 0, nil, err
	}
	var notes []string
	for _, what := range []struct{ name, was, now string }{
		{"precision", precisionOf(m.Config), precisionOf(c)},
		{"strategy", strategyOf(m.Config), strategyOf(c)},
	} {
		if what.was != what.now {
			notes = append(notes, fmt.Sprintf("%s changed from %s to %s", what.name, what.was, what.now))
		}
	}
	if len(notes) == 0 {
		return m.Step, loaded.Converted, nil
	}
	return m.Step, append(notes, loaded.Converted...), nil
}

// precisionOf describes c's precision: its spec and per-module rules.
func precisionOf(c Config) string {
	s := c.Precision
	for _, r := range c.Modules {
		s += fmt.Sprintf(", %s=%s", r.Match, r.Precision)
	}
	return s
}

// modelOf describes c's model, with its size for gpt.
func modelOf(c Config) string {
	if c.Model == "gpt" {
		return fmt.Sprintf("gpt %+v", c.GPT)
	}
	return c.Model
}

// strategyOf describes c's strategy, devices and mesh.
func strategyOf(c Config) string {
	if c.Devices == 1 {
		return c.Strategy + " on 1 device"
	}
	if c.TP > 1 {
		return fmt.Sprintf("%s on %d devices (tp %d)", c.Strategy, c.Devices, c.TP)
	}
	return fmt.Sprintf("%s on %d devices", c.Strategy, c.Devices)
}

// ReadManifest reads the manifest of the latest checkpoint under dir (a
// run's checkpoints folder) and returns it with the checkpoint's folder.
func ReadManifest(dir string) (*Manifest, string, error) {
	b, err := os.ReadFile(filepath.Join(dir, latestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", fmt.Errorf("no checkpoint in %s", dir)
	}
	if err != nil {
		return nil, "", fmt.Errorf("checkpoint: %w", err)
	}
	name := strings.TrimSpace(string(b))
	if name != filepath.Base(name) || !strings.HasPrefix(name, "step-") {
		return nil, "", fmt.Errorf("checkpoint: %s names %q, which is not a checkpoint folder of %s", filepath.Join(dir, latestFile), name, dir)
	}
	ckpt := filepath.Join(dir, name)
	mb, err := os.ReadFile(filepath.Join(ckpt, "manifest.json"))
	if err != nil {
		return nil, "", fmt.Errorf("checkpoint: %w", err)
	}
	m, err := ParseManifest(mb)
	if err != nil {
		return nil, "", fmt.Errorf("checkpoint %s: %w", ckpt, err)
	}
	return m, ckpt, nil
}

// ParseManifest reads and checks a manifest.json of a run's checkpoint.
func ParseManifest(b []byte) (*Manifest, error) {
	fm, err := fabric.ParseManifest(b)
	if err != nil {
		return nil, err
	}
	m := &Manifest{Manifest: *fm}
	if len(fm.Config) > 0 {
		if err := json.Unmarshal(fm.Config, &m.Config); err != nil {
			return nil, fmt.Errorf("manifest: config: %w", err)
		}
	}
	return m, nil
}

// Consolidate writes the latest checkpoint of run as one safetensors file:
// parameters and whole AdamW moments, the optimizer shards joined.
func Consolidate(run, out string) error {
	_, dir, err := ReadManifest(filepath.Join(run, "checkpoints"))
	if err != nil {
		return err
	}
	return fabric.Consolidate(dir, out)
}

// loadWeights copies into m (a fine-tuning start) the weights of from: an
// HF model folder's, a plain safetensors file of them (f's
// fabric.Fabric.LoadRaw), or a run folder's, whose latest checkpoint's
// parameters it takes; optimizer and precision state are not taken.
func loadWeights(f *fabric.Fabric, from string, m models.Model) error {
	if hf.IsModelDir(from) {
		return hf.LoadWeights(from, m)
	}
	st, err := os.Stat(from)
	if err != nil {
		return fmt.Errorf("init from %s: no such file or run folder", from)
	}
	if !st.IsDir() {
		_, err := f.LoadRaw(from, m, fabric.LoadOptions{})
		return err
	}
	man, dir, err := ReadManifest(filepath.Join(from, "checkpoints"))
	if err != nil {
		return err
	}
	ck, err := fabric.OpenCheckpoint(dir)
	if err != nil {
		return err
	}
	if err := sameVocabulary(ck, man, m); err != nil {
		return fmt.Errorf("init from %s: %w", from, err)
	}
	return nn.Load(m, func(path string) (*tensor.Tensor, error) { return ck.Tensor("model." + path) })
}

// sameVocabulary reports a run whose token ids are not m's: another
// tokenizer's weights would load into no model of this run's shape, or
// (of one size) mean other tokens.
func sameVocabulary(ck *fabric.Checkpoint, man *Manifest, m models.Model) error {
	var vocab int
	switch lm := m.(type) {
	case *models.GPT:
		vocab = lm.Config().Vocab
	case *models.Llama:
		vocab = lm.Config().Vocab
	default:
		return nil
	}
	tok, err := ck.Tensor("model.tok.weight")
	if err != nil {
		return nil // no embedding of that name: nn.Load says what is missing
	}
	defer tensor.Free(tok)
	if got := tok.Dim(0); got != vocab {
		return fmt.Errorf("it was trained on %s, a vocabulary of %d token ids; this run's has %d: fine-tune with the tokenizer it used", man.Config.textSource(), got, vocab)
	}
	return nil
}
