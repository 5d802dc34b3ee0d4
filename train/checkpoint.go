package train

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/models/hf"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/tensor"
)

// A run's checkpoints are folders checkpoints/step-NNNNNN, each one the
// fabric's (fabric.Fabric.Save: format weft-checkpoint/2) with this run's
// Config as the manifest's config; checkpoints/latest names the newest
// and is replaced by rename, so a crash never leaves it naming a
// half-written checkpoint. Config.KeepLast of them are kept.
const latestFile = "latest"

// Manifest describes a checkpoint of a run: its folder's manifest and the
// run's Config, read from the manifest's config.
type Manifest struct {
	checkpoint.Manifest
	Config Config
}

type checkpointer struct {
	dir    string
	keep   int // checkpoints kept, the newest
	fabric *fabric.Fabric
	comm   comm.Communicator // every rank takes part in save and load
}

// stepFolder names the checkpoint folder of step.
func stepFolder(step int) string { return fmt.Sprintf("step-%06d", step) }

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
	name := stepFolder(step)
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

// prune removes all but the newest k.keep checkpoints.
func (k *checkpointer) prune() error {
	names, err := filepath.Glob(filepath.Join(k.dir, "step-*"))
	if err != nil {
		return err
	}
	sort.Strings(names)
	for len(names) > k.keep {
		if err := os.RemoveAll(names[0]); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		names = names[1:]
	}
	return nil
}

// resumed is the checkpoint a resume loaded.
type resumed struct {
	step  int
	dir   string
	notes []string // settings changed since, conversions the load took
}

// load restores the checkpoint c.ResumeFrom names (the latest by default)
// into the fabric's model, optimizer and precision state. A changed model
// or data is an error; other changed settings, and the conversions a
// changed precision, strategy or device count took, are its notes.
func (k *checkpointer) load(c Config) (resumed, error) {
	m, dir, err := k.pick(c.ResumeFrom)
	if err != nil {
		return resumed{}, err
	}
	refused, changed := changes(m.Config, c)
	if len(refused) > 0 {
		return resumed{}, fmt.Errorf("resume: checkpoint %s trained another model or data than this run: %s; resume with the checkpoint's model and data, or train into another --out", dir, strings.Join(refused, ", "))
	}
	loaded, err := k.fabric.Load(dir, fabric.LoadOptions{})
	if u := (*checkpoint.UnexpectedError)(nil); errors.As(err, &u) {
		// A precision that freezes weights (nf4, int8) holds them as codes,
		// not parameters: --init-from quantizes a run's weights instead.
		return resumed{}, fmt.Errorf("resume: checkpoint %s holds %d tensors this run's model has no parameter for (%s): under --precision %s start from its weights with --init-from %s and another --out", dir, len(u.Names), u.FirstNames(), c.Precision, filepath.Dir(k.dir))
	}
	if err != nil {
		if _, corrupt := checkpoint.OpenFolder(dir); corrupt != nil {
			return resumed{}, withIntact(k.dir, dir, err)
		}
		return resumed{}, err
	}
	r := resumed{step: m.Step, dir: dir}
	if len(changed) > 0 {
		r.notes = append(r.notes, fmt.Sprintf("changed since checkpoint %s: %s", dir, strings.Join(changed, ", ")))
	}
	r.notes = append(r.notes, loaded.Converted...)
	return r, nil
}

// pick finds the checkpoint a resume loads and reads its manifest: the one
// from names (a step of this run, or a checkpoint folder), or the latest.
// One that cannot be read is an error naming the newest intact one.
func (k *checkpointer) pick(from string) (*Manifest, string, error) {
	dir, err := from, error(nil)
	switch step, notStep := strconv.Atoi(from); {
	case from == "":
		dir, err = latestCheckpoint(k.dir)
	case notStep == nil:
		dir = filepath.Join(k.dir, stepFolder(step))
		if _, err := os.Stat(dir); err != nil {
			return nil, "", fmt.Errorf("resume-from %s: %s holds no checkpoint of step %d, only of steps %s", from, k.dir, step, cmp.Or(joinInts(checkpointSteps(k.dir)), "none"))
		}
	}
	var m *Manifest
	if err == nil {
		m, err = readManifestAt(dir)
	}
	if err != nil && len(checkpointSteps(k.dir)) > 0 {
		return nil, "", withIntact(k.dir, dir, err)
	}
	return m, dir, err
}

// withIntact adds to err, why checkpoint bad cannot be resumed from, the
// newest other checkpoint under dir that is intact (every file matching
// its digests) and the flag that resumes from it.
func withIntact(dir, bad string, err error) error {
	steps := checkpointSteps(dir)
	for i := len(steps) - 1; i >= 0; i-- {
		ckpt := filepath.Join(dir, stepFolder(steps[i]))
		if bad != "" && ckpt == filepath.Clean(bad) {
			continue
		}
		if _, unreadable := checkpoint.OpenFolder(ckpt); unreadable == nil {
			return fmt.Errorf("%w; the newest intact checkpoint is %s: resume from it with --resume-from %d", err, ckpt, steps[i])
		}
	}
	return fmt.Errorf("%w; no other checkpoint in %s is intact: start over with --overwrite, or train into another --out", err, dir)
}

// setting is one of a run's settings as a resume compares it with the
// checkpoint's: a change of one that refuses trains another model or on
// other data; the others are announced.
type setting struct {
	name    string
	of      func(Config) string
	refuses bool
}

var resumeSettings = []setting{
	{"model", modelOf, true},
	{"data", dataOf, true},
	{"lora", adaptersOf, true},
	{"seed", func(c Config) string { return fmt.Sprint(c.Seed) }, false},
	{"lr", func(c Config) string { return fmt.Sprint(c.LR) }, false},
	{"lr-schedule", scheduleOf, false},
	{"beta1", func(c Config) string { return fmt.Sprint(c.Beta1) }, false},
	{"beta2", func(c Config) string { return fmt.Sprint(c.Beta2) }, false},
	{"eps", func(c Config) string { return fmt.Sprint(c.Eps) }, false},
	{"weight-decay", func(c Config) string { return fmt.Sprint(c.WeightDecay) }, false},
	{"batch-size", func(c Config) string { return fmt.Sprint(c.BatchSize) }, false},
	{"grad-accum", func(c Config) string { return fmt.Sprint(c.GradAccum) }, false},
	{"grad-sync", func(c Config) string { return c.GradSync }, false},
	{"clip-value", func(c Config) string { return fmt.Sprint(c.ClipValue) }, false},
	{"clip-norm", func(c Config) string { return fmt.Sprint(c.ClipNorm) }, false},
	{"lora-alpha", func(c Config) string { return fmt.Sprint(c.LoRA.Alpha) }, false},
	{"precision", precisionOf, false},
	{"eval-precision", func(c Config) string { return cmp.Or(c.EvalPrecision, "the training precision") }, false},
	{"loss-scale", func(c Config) string { return c.LossScale }, false},
	{"strategy", strategyOf, false},
	{"on-nan", func(c Config) string { return c.OnNaN }, false},
}

// changes lists the settings of was (a checkpoint's) that now differs
// from, as "name was -> now": those a resume refuses, and the others.
func changes(was, now Config) (refused, changed []string) {
	for _, s := range resumeSettings {
		a, b := s.of(was), s.of(now)
		if a == b {
			continue
		}
		line := fmt.Sprintf("%s %s -> %s", s.name, a, b)
		if s.refuses {
			refused = append(refused, line)
		} else {
			changed = append(changed, line)
		}
	}
	return refused, changed
}

// dataOf describes what c's model trains on.
func dataOf(c Config) string {
	if _, err := languageSpec(c.Model); err != nil {
		return "the model's bundled data"
	}
	return c.textSource()
}

// adaptersOf describes the LoRA adapters c trains.
func adaptersOf(c Config) string {
	if len(c.LoRA.Targets) == 0 {
		return "none"
	}
	return fmt.Sprintf("%s (rank %d)", strings.Join(c.LoRA.Targets, ","), c.LoRA.Rank)
}

// scheduleOf describes c's learning-rate schedule as Build resolves it.
func scheduleOf(c Config) string {
	s, err := c.LRSchedule.Build(c.LR, c.Steps)
	switch s := s.(type) {
	case optim.Cosine:
		return fmt.Sprintf("cosine (warmup %d, to %g at step %d)", s.Warmup, s.Min, s.Decay)
	case optim.StepDecay:
		return fmt.Sprintf("step (×%g every %d)", s.Gamma, s.Every)
	}
	if err != nil {
		return c.LRSchedule.Name
	}
	return "constant"
}

// precisionOf describes c's precision: its spec and per-module rules.
func precisionOf(c Config) string {
	s := c.Precision
	for _, r := range c.Modules {
		s += fmt.Sprintf(", %s=%s", r.Match, r.Precision)
	}
	return s
}

// modelOf describes c's model, with its size for a language model.
func modelOf(c Config) string {
	if _, err := languageSpec(c.Model); err == nil {
		return c.Model + " " + sizeOf(c.GPT)
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

// LatestCheckpoint finds the latest checkpoint under dir (a run's
// checkpoints folder) and returns its manifest and folder.
func LatestCheckpoint(dir string) (*Manifest, string, error) {
	ckpt, err := latestCheckpoint(dir)
	if err != nil {
		return nil, "", err
	}
	m, err := readManifestAt(ckpt)
	if err != nil {
		return nil, "", err
	}
	return m, ckpt, nil
}

// latestCheckpoint is the checkpoint folder dir's latest names.
func latestCheckpoint(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, latestFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("no checkpoint in %s", dir)
	}
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	name := strings.TrimSpace(string(b))
	if name != filepath.Base(name) || !strings.HasPrefix(name, "step-") {
		return "", fmt.Errorf("checkpoint: %s names %q, which is not a checkpoint folder of %s", filepath.Join(dir, latestFile), name, dir)
	}
	return filepath.Join(dir, name), nil
}

// readManifestAt reads the manifest of checkpoint folder ckpt
// (checkpoint.ReadManifest) and the run's Config in it.
func readManifestAt(ckpt string) (*Manifest, error) {
	fm, err := checkpoint.ReadManifest(ckpt)
	if err != nil {
		return nil, err
	}
	c, err := runConfig(fm.Config)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", ckpt, err)
	}
	return &Manifest{Manifest: *fm, Config: c}, nil
}

// runConfig is the run config a checkpoint recorded as JSON. A setting
// it lacks (its run predates the setting) reads as today's default,
// which that run trained with.
func runConfig(recorded json.RawMessage) (Config, error) {
	c := Defaults()
	if len(recorded) > 0 {
		if err := json.Unmarshal(recorded, &c); err != nil {
			return Config{}, fmt.Errorf("manifest: config: %w", err)
		}
	}
	return c, nil
}

// Consolidate writes the latest checkpoint of run as one safetensors file:
// parameters and whole AdamW moments, the optimizer shards joined.
func Consolidate(run, out string) error {
	if st, err := os.Stat(out); err == nil && st.IsDir() {
		return fmt.Errorf("consolidate: %s is a folder; give the file to write, such as %s", out, filepath.Join(out, "model.safetensors"))
	}
	_, dir, err := LatestCheckpoint(filepath.Join(run, "checkpoints"))
	if err != nil {
		return err
	}
	return checkpoint.Consolidate(dir, out)
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
	man, dir, err := LatestCheckpoint(filepath.Join(from, "checkpoints"))
	if err != nil {
		return err
	}
	ck, err := checkpoint.OpenFolder(dir)
	if err != nil {
		return err
	}
	if err := sameVocabulary(ck, man, m); err != nil {
		return fmt.Errorf("init from %s: %w", from, err)
	}
	return nn.Load(m, func(path string) (*tensor.Tensor, error) {
		t, err := ck.Tensor("model." + path)
		if err != nil {
			return nil, err
		}
		return tensor.FromBytes(t.DType, t.Data, t.Shape...)
	})
}

// sameVocabulary reports a run whose token ids are not m's: another
// tokenizer's weights would load into no model of this run's shape, or
// (of one size) mean other tokens.
func sameVocabulary(ck *checkpoint.Folder, man *Manifest, m models.Model) error {
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
	if err != nil || len(tok.Shape) == 0 {
		return nil // no embedding of that name: nn.Load says what is missing
	}
	if got := tok.Shape[0]; got != vocab {
		return fmt.Errorf("it was trained on %s, a vocabulary of %d token ids; this run's has %d: fine-tune with the tokenizer it used", man.Config.textSource(), got, vocab)
	}
	return nil
}
