package train

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/parallel"
	"github.com/weftml/weft/tensor"
)

// A checkpoint is a folder checkpoints/step-NNNNNN holding state.safetensors
// (parameters "model.<path>", and AdamW moments "optim.<path>.exp_avg" and
// ".exp_avg_sq" unless the optimizer was sharded), one
// optim-rank-RRR.safetensors per rank when it was (each rank's chunks of
// the moments, as ZeRO shards them), and manifest.json; checkpoints/latest
// names the newest. The folder is written under a temporary name and
// renamed, and latest is replaced by rename, so a crash never leaves a
// half-written checkpoint where a reader looks. A sharded checkpoint loads
// onto any number of ranks: the chunks are joined and cut anew.
const (
	manifestFormat = "weft-checkpoint/2"
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
	// OptimizerShards is the number of optim-rank files (0: the moments
	// are whole, in state.safetensors).
	OptimizerShards int `json:"optimizer_shards"`
	// Digests are the SHA-256 of every file of the checkpoint and of every
	// tensor in it, by file name; loading checks them.
	Digests map[string]checkpoint.Digest `json:"digests"`
}

type checkpointer struct {
	dir    string
	model  nn.Module
	opt    *optim.AdamW
	fabric *fabric.Fabric
	comm   comm.Communicator // every rank takes part in save and load
	// tensors is the layout of a tensor-parallel model (nil for none),
	// whose split tensors a checkpoint holds whole.
	tensors *parallel.Layout
}

// shardFile names rank r's optimizer shard.
func shardFile(r int) string { return fmt.Sprintf("optim-rank-%03d.safetensors", r) }

// sharded reports whether this run's optimizer holds chunks.
func (k *checkpointer) sharded() bool {
	return k.fabric.Rank() != nil && k.fabric.Rank().Info.Sharding.OptimizerState
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
	tmp := filepath.Join(k.dir, ".tmp-"+name)
	lead := k.comm.Rank() == 0
	if lead {
		if err := os.RemoveAll(tmp); err != nil {
			return "", fmt.Errorf("checkpoint: %w", err)
		}
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			return "", fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := k.comm.Barrier(ctx); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	m := Manifest{Format: manifestFormat, Step: step, Config: c, OptimizerSteps: map[string]int{},
		Precision: map[string]json.RawMessage{}, FabricSteps: k.fabric.StepCount()}
	var tensors, moments []checkpoint.Tensor
	var gathered []*tensor.Tensor // the whole values of split tensors
	defer func() {
		for _, t := range gathered {
			tensor.Free(t)
		}
	}()
	// whole is what k.wholeParam or k.wholeMoment makes of t.
	whole := func(t *tensor.Tensor, make func() (*tensor.Tensor, error)) (*tensor.Tensor, error) {
		w, err := make()
		if err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		if w != t {
			gathered = append(gathered, w)
		}
		return w, nil
	}
	for i, p := range nn.Parameters(k.model) {
		v, err := whole(p.Var.Value, func() (*tensor.Tensor, error) { return k.wholeParam(ctx, i, p) })
		if err != nil {
			return "", err
		}
		tensors = append(tensors, k.whole(ctx, "model."+p.Path, i, v))
		if st := k.opt.State(p.Path); st != nil {
			m.OptimizerSteps[p.Path] = st.Step
			avg, err := whole(st.ExpAvg, func() (*tensor.Tensor, error) { return k.wholeMoment(ctx, p, st.ExpAvg) })
			if err != nil {
				return "", err
			}
			avgSq, err := whole(st.ExpAvgSq, func() (*tensor.Tensor, error) { return k.wholeMoment(ctx, p, st.ExpAvgSq) })
			if err != nil {
				return "", err
			}
			moments = append(moments, stored("optim."+p.Path+".exp_avg", avg), stored("optim."+p.Path+".exp_avg_sq", avgSq))
		}
	}
	if k.sharded() && k.tensors == nil { // a mesh's moments are gathered whole
		m.OptimizerShards = k.comm.Size()
		if err := checkpoint.WriteSafetensors(filepath.Join(tmp, shardFile(k.comm.Rank())), moments, nil); err != nil {
			return "", err
		}
	} else {
		tensors = append(tensors, moments...)
	}
	if err := k.comm.Barrier(ctx); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if !lead {
		for _, t := range tensors { // the gathers of the parameters rank 0 writes
			if t.Load != nil {
				_, done, err := t.Load()
				if err != nil {
					return "", fmt.Errorf("checkpoint: %w", err)
				}
				done()
			}
		}
		return final, k.comm.Barrier(ctx) // until rank 0 has published it
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
	m.Digests = map[string]checkpoint.Digest{}
	for _, name := range m.files() {
		d, err := checkpoint.DigestSafetensors(filepath.Join(tmp, name))
		if err != nil {
			return "", fmt.Errorf("checkpoint: %w", err)
		}
		m.Digests[name] = d
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
	if err := k.prune(); err != nil {
		return "", err
	}
	return final, k.comm.Barrier(ctx)
}

// whole is parameter i, value v, as the checkpoint stores it: whole, and
// under FSDP gathered only when the writer reaches it, so that a rank never
// holds more than one whole parameter beyond its chunks.
func (k *checkpointer) whole(ctx context.Context, name string, i int, v *tensor.Tensor) checkpoint.Tensor {
	rank := k.fabric.Rank()
	if !v.IsMeta() || rank == nil {
		return stored(name, v)
	}
	return checkpoint.Tensor{Name: name, DType: v.DType(), Shape: v.Shape(), Load: func() ([]byte, func(), error) {
		t, release, err := rank.Whole(ctx, i)
		if err != nil {
			return nil, nil, err
		}
		return t.Data(), release, nil
	}}
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
	s, err := openLatest(k.dir)
	if err != nil {
		return 0, err
	}
	m, dir := s.manifest, s.dir
	if m.Config.Model != c.Model || m.Config.GPT != c.GPT {
		return 0, fmt.Errorf("checkpoint %s holds model %s %+v, this run is %s %+v", dir, m.Config.Model, m.Config.GPT, c.Model, c.GPT)
	}
	if was, is := m.Config.textSource(), c.textSource(); was != is {
		return 0, fmt.Errorf("checkpoint %s trained on %s, this run on %s", dir, was, is)
	}
	// get reads a tensor that must have like's dtype and shape.
	get := func(name string, like *tensor.Tensor, read func(string, []int) (*tensor.Tensor, error)) (*tensor.Tensor, error) {
		t, err := read(name, like.Shape())
		if err != nil {
			return nil, err
		}
		if t.DType() != like.DType() || !t.SameShape(like) {
			return nil, fmt.Errorf("checkpoint %s: tensor %s is %s, the run needs %s (was it saved with another precision?)", dir, name, t, like)
		}
		return t, nil
	}
	for i, p := range nn.Parameters(k.model) {
		v, err := get("model."+p.Path, k.wholeLike(p, p.Var.Value), s.tensor)
		if err != nil {
			return 0, err
		}
		if p.Var.Value, err = k.share(p, v); err != nil {
			return 0, err
		}
		steps, ok := m.OptimizerSteps[p.Path]
		if !ok {
			continue
		}
		like := p.Var.Value
		if dt := k.opt.StateDType; dt != 0 {
			like = tensor.New(dt, like.Shape()...)
		}
		like = k.wholeLike(p, like)
		st := &optim.AdamState{Step: steps}
		for _, moment := range []struct {
			name string
			to   **tensor.Tensor
		}{{"exp_avg", &st.ExpAvg}, {"exp_avg_sq", &st.ExpAvgSq}} {
			t, err := get("optim."+p.Path+"."+moment.name, like, s.moment)
			if err != nil {
				return 0, err
			}
			if *moment.to, err = k.share(p, t); err != nil {
				return 0, err
			}
		}
		if k.sharded() {
			st.ExpAvg, st.ExpAvgSq = k.fabric.Rank().Shard(i, st.ExpAvg), k.fabric.Rank().Shard(i, st.ExpAvgSq)
		}
		if err := k.opt.SetState(p.Path, st); err != nil {
			return 0, err
		}
	}
	if k.fabric.Rank() != nil {
		k.fabric.Rank().Reshard()
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

// saved is a checkpoint opened for reading: its manifest, state file and,
// when the optimizer was sharded, every rank's optimizer shard.
type saved struct {
	manifest *Manifest
	dir      string
	file     *checkpoint.File
	shards   []*checkpoint.File
}

// files names the checkpoint's safetensors files.
func (m *Manifest) files() []string {
	names := []string{stateFile}
	for r := range m.OptimizerShards {
		names = append(names, shardFile(r))
	}
	return names
}

// readFile reads and parses a safetensors file, keeping its bytes.
func readFile(path string) (*checkpoint.File, []byte, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("checkpoint %s: %s is missing, though the manifest lists it", filepath.Dir(path), filepath.Base(path))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	f, err := checkpoint.ParseSafetensors(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return f, raw, nil
}

func digest(f *checkpoint.File, raw []byte) checkpoint.Digest {
	d := checkpoint.Digest{File: sha(raw), Tensors: map[string]string{}}
	for _, name := range f.Names() {
		t, _ := f.Tensor(name)
		d.Tensors[name] = sha(t.Data)
	}
	return d
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// verify checks a file of checkpoint ckpt against its digest in the
// manifest, naming the first tensor that differs.
func (m *Manifest) verify(ckpt, name string, f *checkpoint.File, raw []byte) error {
	want, ok := m.Digests[name]
	if !ok {
		return fmt.Errorf("checkpoint %s: the manifest has no digest of %s", ckpt, name)
	}
	got := digest(f, raw)
	for _, t := range f.Names() {
		if got.Tensors[t] != want.Tensors[t] {
			return fmt.Errorf("checkpoint %s: tensor %s of %s does not match its SHA-256 in the manifest (the file is corrupt, was changed, or comes from another checkpoint)", ckpt, t, name)
		}
	}
	if got.File != want.File || len(got.Tensors) != len(want.Tensors) {
		return fmt.Errorf("checkpoint %s: %s does not match its SHA-256 in the manifest (the file is corrupt, was changed, or comes from another checkpoint)", ckpt, name)
	}
	return nil
}

// openLatest opens the latest checkpoint under dir (a run's checkpoints
// folder), checking every file against the manifest's digests.
func openLatest(dir string) (*saved, error) {
	m, ckpt, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	s := &saved{manifest: m, dir: ckpt}
	for i, name := range m.files() {
		f, err := OpenVerified(ckpt, m, name)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			s.file = f
		} else {
			s.shards = append(s.shards, f)
		}
	}
	return s, nil
}

// OpenVerified reads the file called name of checkpoint folder ckpt,
// whose manifest is m, and checks it against m's digests.
func OpenVerified(ckpt string, m *Manifest, name string) (*checkpoint.File, error) {
	f, raw, err := readFile(filepath.Join(ckpt, name))
	if err != nil {
		return nil, err
	}
	return f, m.verify(ckpt, name, f, raw)
}

// tensor reads a tensor of state.safetensors (shape is not needed there).
func (s *saved) tensor(name string, _ []int) (*tensor.Tensor, error) {
	t, ok := s.file.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: tensor %s is missing", s.dir, name)
	}
	return tensor.FromBytes(t.DType, t.Data, t.Shape...)
}

// moment reads a whole optimizer moment of the given shape: from
// state.safetensors, or joined from every rank's chunks.
func (s *saved) moment(name string, shape []int) (*tensor.Tensor, error) {
	if len(s.shards) == 0 {
		return s.tensor(name, shape)
	}
	var whole []byte
	dt := dtype.Invalid
	for r, f := range s.shards {
		t, ok := f.Tensor(name)
		if !ok || (dt != dtype.Invalid && t.DType != dt) {
			return nil, fmt.Errorf("checkpoint %s: %s lacks %s (or holds it in another dtype)", s.dir, shardFile(r), name)
		}
		dt = t.DType
		whole = append(whole, t.Data...)
	}
	size := dt.StorageBytes(tensor.Numel(shape))
	if len(whole) < size {
		return nil, fmt.Errorf("checkpoint %s: the chunks of %s hold %d bytes, the tensor %d", s.dir, name, len(whole), size)
	}
	return tensor.FromBytes(dt, whole[:size], shape...)
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
	if len(m.Digests) == 0 {
		return nil, fmt.Errorf("manifest: no digests of the checkpoint's files")
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

// Consolidate writes the latest checkpoint of run as one safetensors file:
// parameters and whole AdamW moments, the optimizer shards joined.
func Consolidate(run, out string) error {
	s, err := openLatest(filepath.Join(run, "checkpoints"))
	if err != nil {
		return err
	}
	var tensors []checkpoint.Tensor
	for _, name := range s.file.Names() {
		t, _ := s.file.Tensor(name)
		tensors = append(tensors, t)
		path, ok := strings.CutPrefix(name, "model.")
		if _, stepped := s.manifest.OptimizerSteps[path]; !ok || !stepped || len(s.shards) == 0 {
			continue
		}
		for _, which := range []string{".exp_avg", ".exp_avg_sq"} {
			whole, err := s.moment("optim."+path+which, t.Shape)
			if err != nil {
				return err
			}
			tensors = append(tensors, stored("optim."+path+which, whole))
		}
	}
	return checkpoint.WriteSafetensors(out, tensors, map[string]string{"format": manifestFormat, "step": fmt.Sprint(s.manifest.Step)})
}

// loadWeights copies the parameters of run's latest checkpoint into m (a
// fine-tuning start); optimizer and precision state are not taken.
func loadWeights(run string, m nn.Module) error {
	s, err := openLatest(filepath.Join(run, "checkpoints"))
	if err != nil {
		return err
	}
	return nn.Load(m, func(path string) (*tensor.Tensor, error) { return s.tensor("model."+path, nil) })
}
