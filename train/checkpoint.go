package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/tensor"
)

// A checkpoint is a folder checkpoints/step-NNNNNN holding state.safetensors
// (parameters "model.<path>", AdamW moments "optim.<path>.exp_avg" and
// ".exp_avg_sq") and manifest.json; checkpoints/latest names the newest.
// The folder is written under a temporary name and renamed, and latest is
// replaced by rename, so a crash never leaves a half-written checkpoint
// where a reader looks.
const (
	manifestFormat = "weft-checkpoint/1"
	stateFile      = "state.safetensors"
	manifestFile   = "manifest.json"
	latestFile     = "latest"
	keepCheckpoint = 2
)

// Manifest describes a checkpoint.
type Manifest struct {
	Format         string                     `json:"format"`
	Step           int                        `json:"step"` // steps done; the run resumes at this step
	Config         Config                     `json:"config"`
	OptimizerSteps map[string]int             `json:"optimizer_steps"`
	Precision      map[string]json.RawMessage `json:"precision"` // plugin state by name
	FabricSteps    int                        `json:"fabric_steps"`
}

type checkpointer struct {
	dir    string
	model  nn.Module
	opt    *optim.AdamW
	fabric *fabric.Fabric
}

// save writes the checkpoint of step and makes it the latest.
func (k *checkpointer) save(c Config, step int) (string, error) {
	name := fmt.Sprintf("step-%06d", step)
	final := filepath.Join(k.dir, name)
	tmp := filepath.Join(k.dir, ".tmp-"+name)
	if err := os.RemoveAll(tmp); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	m := Manifest{Format: manifestFormat, Step: step, Config: c, OptimizerSteps: map[string]int{},
		Precision: map[string]json.RawMessage{}, FabricSteps: k.fabric.StepCount()}
	var tensors []checkpoint.Tensor
	for _, p := range nn.Parameters(k.model) {
		tensors = append(tensors, stored("model."+p.Path, p.Var.Value))
		if st := k.opt.State(p.Path); st != nil {
			m.OptimizerSteps[p.Path] = st.Step
			tensors = append(tensors, stored("optim."+p.Path+".exp_avg", st.ExpAvg), stored("optim."+p.Path+".exp_avg_sq", st.ExpAvgSq))
		}
	}
	for name, st := range k.fabric.States() {
		b, err := st.MarshalState()
		if err != nil {
			return "", fmt.Errorf("checkpoint: precision state %s: %w", name, err)
		}
		m.Precision[name] = b
	}
	if err := checkpoint.WriteSafetensors(filepath.Join(tmp, stateFile), tensors, map[string]string{"format": manifestFormat}); err != nil {
		return "", err
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", err
	}
	if err := writeAtomic(filepath.Join(tmp, manifestFile), mb); err != nil {
		return "", err
	}
	if err := os.RemoveAll(final); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if err := writeAtomic(filepath.Join(k.dir, latestFile), []byte(name+"\n")); err != nil {
		return "", err
	}
	return final, k.prune()
}

func stored(name string, t *tensor.Tensor) checkpoint.Tensor {
	return checkpoint.Tensor{Name: name, DType: t.DType(), Shape: t.Shape(), Data: t.Data()}
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

// load restores the latest checkpoint into the model, optimizer and
// precision state, and returns the step to resume at.
func (k *checkpointer) load(c Config) (int, error) {
	m, dir, err := ReadManifest(k.dir)
	if err != nil {
		return 0, err
	}
	if m.Config.Model != c.Model || m.Config.GPT != c.GPT {
		return 0, fmt.Errorf("checkpoint %s holds model %s %+v, this run is %s %+v", dir, m.Config.Model, m.Config.GPT, c.Model, c.GPT)
	}
	f, err := checkpoint.ReadSafetensors(filepath.Join(dir, stateFile))
	if err != nil {
		return 0, err
	}
	get := func(name string, like *tensor.Tensor) (*tensor.Tensor, error) {
		t, ok := f.Tensor(name)
		if !ok {
			return nil, fmt.Errorf("checkpoint %s: tensor %s is missing", dir, name)
		}
		if t.DType != like.DType() || !tensor.EqualShape(t.Shape, like.Shape()) {
			return nil, fmt.Errorf("checkpoint %s: tensor %s is %s%v, the run needs %s%v (was it saved with another precision?)", dir, name, t.DType, t.Shape, like.DType(), like.Shape())
		}
		return tensor.FromBytes(t.DType, t.Data, t.Shape...)
	}
	for _, p := range nn.Parameters(k.model) {
		v, err := get("model."+p.Path, p.Var.Value)
		if err != nil {
			return 0, err
		}
		p.Var.Value = v
		steps, ok := m.OptimizerSteps[p.Path]
		if !ok {
			continue
		}
		like := p.Var.Value
		if dt := k.opt.StateDType; dt != 0 {
			like = tensor.New(dt, like.Shape()...)
		}
		ea, err := get("optim."+p.Path+".exp_avg", like)
		if err != nil {
			return 0, err
		}
		eas, err := get("optim."+p.Path+".exp_avg_sq", like)
		if err != nil {
			return 0, err
		}
		if err := k.opt.SetState(p.Path, &optim.AdamState{Step: steps, ExpAvg: ea, ExpAvgSq: eas}); err != nil {
			return 0, err
		}
	}
	for name, st := range k.fabric.States() {
		b, ok := m.Precision[name]
		if !ok {
			return 0, fmt.Errorf("checkpoint %s has no state for precision plugin %s", dir, name)
		}
		if err := st.UnmarshalState(b); err != nil {
			return 0, fmt.Errorf("checkpoint %s: %w", dir, err)
		}
	}
	k.fabric.SetStepCount(m.FabricSteps)
	return m.Step, nil
}

// ReadManifest reads the manifest of the latest checkpoint under dir (a
// run's checkpoints folder) and returns it with the checkpoint's folder.
func ReadManifest(dir string) (*Manifest, string, error) {
	b, err := os.ReadFile(filepath.Join(dir, latestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", fmt.Errorf("no checkpoint to resume from in %s", dir)
	}
	if err != nil {
		return nil, "", fmt.Errorf("checkpoint: %w", err)
	}
	name := strings.TrimSpace(string(b))
	if name != filepath.Base(name) || !strings.HasPrefix(name, "step-") {
		return nil, "", fmt.Errorf("checkpoint: %s names %q, which is not a checkpoint folder of %s", filepath.Join(dir, latestFile), name, dir)
	}
	ckpt := filepath.Join(dir, name)
	mb, err := os.ReadFile(filepath.Join(ckpt, manifestFile))
	if err != nil {
		return nil, "", fmt.Errorf("checkpoint: %w", err)
	}
	m, err := ParseManifest(mb)
	if err != nil {
		return nil, "", fmt.Errorf("checkpoint %s: %w", ckpt, err)
	}
	return m, ckpt, nil
}

// ParseManifest reads and checks a manifest.json.
func ParseManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if m.Format != manifestFormat {
		return nil, fmt.Errorf("manifest: format %q, want %q", m.Format, manifestFormat)
	}
	if m.Step < 0 || m.FabricSteps < 0 {
		return nil, fmt.Errorf("manifest: negative step %d", m.Step)
	}
	for path, n := range m.OptimizerSteps {
		if n < 0 {
			return nil, fmt.Errorf("manifest: optimizer step %d for %s", n, path)
		}
	}
	return &m, nil
}

// writeAtomic writes b to path through a synced temporary file and a rename.
func writeAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return os.Rename(tmp.Name(), path)
}
