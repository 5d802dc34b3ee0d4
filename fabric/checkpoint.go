package fabric

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/tensor"
)

// A checkpoint is a folder holding state.safetensors (parameters
// "model.<path>", and AdamW moments "optim.<path>.exp_avg" and
// ".exp_avg_sq" unless they are sharded), one optim-rank-RRR.safetensors
// per rank when the optimizer was sharded and the save was not Full (each
// rank's chunks of the moments, as ZeRO shards them), and manifest.json
// with every file's and tensor's SHA-256. Save writes the folder under a
// temporary name and renames it, so a crash never leaves a half-written
// checkpoint at its name. A sharded checkpoint loads onto any number of
// ranks: the chunks are joined and cut anew.
const (
	CheckpointFormat = "weft-checkpoint/2"
	stateFile        = "state.safetensors"
	manifestFile     = "manifest.json"
)

// Manifest describes a checkpoint.
type Manifest struct {
	Format string `json:"format"`
	Step   int    `json:"step"` // the caller's step count (weft train resumes at it)
	// Config is the caller's description of the run, as JSON (weft
	// train's Config); the fabric neither reads nor checks it.
	Config         json.RawMessage            `json:"config,omitempty"`
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

// SaveOptions are what Save records beside the training state.
type SaveOptions struct {
	Step   int // the caller's step count, Manifest.Step
	Config any // marshalled to JSON as Manifest.Config; nil for none
	// Full writes the optimizer moments whole into state.safetensors even
	// when the strategy shards them, gathering every rank's chunks
	// (Lightning's state_dict_type "full"); false writes one file per rank.
	Full bool
}

// LoadOptions say how strictly Load and LoadRaw match a checkpoint to the
// model.
type LoadOptions struct {
	// Partial loads what matches and reports the rest in Loaded (Missing,
	// Unexpected) instead of failing: Lightning's strict=False. A
	// parameter the checkpoint lacks keeps its value (under fsdp: the
	// chunk its initialiser draws).
	Partial bool
}

// Loaded is what a load did.
type Loaded struct {
	Manifest *Manifest // nil after LoadRaw
	// Missing are the model's parameters (and optimizer moments) the file
	// lacks; Unexpected the tensors of the file nothing took. Both are
	// empty unless LoadOptions.Partial.
	Missing, Unexpected []string
	// Converted has one line per kind of conversion done to fit this
	// fabric's precision and strategy ("cast 14 parameters
	// float32→bfloat16"); empty when the checkpoint fit as it was.
	Converted []string
}

// adamStates is the optimizer whose moments a checkpoint holds (AdamW);
// other optimizers checkpoint no state.
type adamStates interface {
	State(path string) *optim.AdamState
	SetState(path string, st *optim.AdamState) error
}

// shardFile names rank r's optimizer shard.
func shardFile(r int) string { return fmt.Sprintf("optim-rank-%03d.safetensors", r) }

// shardedOptimizer reports whether this rank's optimizer holds chunks.
func (f *Fabric) shardedOptimizer() bool {
	return f.dist != nil && f.dist.Info.Sharding.OptimizerState
}

// barrier waits for every rank (nothing to wait for on one device).
func (f *Fabric) barrier(ctx context.Context) error {
	c := f.mesh.c // every rank of a mesh
	switch {
	case c == nil && f.dist == nil:
		return nil
	case c == nil:
		c = f.dist.Comm()
	}
	if err := c.Barrier(ctx); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// Save writes the model's parameters, the optimizer's moments and the
// precision state to the checkpoint folder dir, replacing one that is
// there; every rank calls it (its collectives run under ctx) and rank 0
// writes all but the ranks' optimizer shards. Under fsdp each parameter
// is gathered only when the writer reaches it, so that no rank holds more
// than one whole parameter beyond its chunks. It tells the CheckpointHook
// callbacks.
func (f *Fabric) Save(ctx context.Context, dir string, opts SaveOptions) error {
	if err := f.save(ctx, dir, opts); err != nil {
		return err
	}
	return notify(f.cfg.Callbacks, func(h CheckpointHook) error { return h.OnCheckpoint(opts.Step, dir) })
}

func (f *Fabric) save(ctx context.Context, dir string, opts SaveOptions) error {
	if err := f.ready("Save"); err != nil {
		return err
	}
	// A checkpoint of inf/NaN weights would become the latest, and every
	// resume would start from weights nothing can train.
	if why, bad, err := f.paramsNonFinite(ctx); err != nil || bad {
		return errors.Join(err, fmt.Errorf("fabric: save: %s; not saved, the last checkpoint stays the latest", why))
	}
	tmp := filepath.Join(filepath.Dir(dir), ".tmp-"+filepath.Base(dir))
	lead := f.IsGlobalZero()
	if lead {
		if err := os.RemoveAll(tmp); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := f.barrier(ctx); err != nil {
		return err
	}
	m := Manifest{Format: CheckpointFormat, Step: opts.Step, OptimizerSteps: map[string]int{},
		Precision: map[string]json.RawMessage{}, FabricSteps: f.steps}
	if opts.Config != nil {
		b, err := json.Marshal(opts.Config)
		if err != nil {
			return fmt.Errorf("checkpoint: config: %w", err)
		}
		m.Config = b
	}
	var gathered []*tensor.Tensor // a mesh's whole tensors, freed once written
	defer func() {
		for _, t := range gathered {
			tensor.Free(t)
		}
	}()
	tensors, moments, err := f.stateTensors(ctx, &m, opts.Full, &gathered)
	if err != nil {
		return err
	}
	if f.shardedOptimizer() && !opts.Full && f.tensors == nil {
		chunk, chunks := f.dist.Chunks()
		m.OptimizerShards = chunks
		if f.dist.Replica() == 0 { // hsdp's other replicas hold the same chunks
			if err := checkpoint.WriteSafetensors(filepath.Join(tmp, shardFile(chunk)), moments, nil); err != nil {
				return err
			}
		}
	} else {
		tensors = append(tensors, moments...)
	}
	if err := f.barrier(ctx); err != nil {
		return err
	}
	if !lead {
		for _, t := range tensors { // the gathers of the parameters rank 0 writes
			if t.Load != nil {
				_, done, err := t.Load()
				if err != nil {
					return fmt.Errorf("checkpoint: %w", err)
				}
				done()
			}
		}
		return f.barrier(ctx) // until rank 0 has published it
	}
	if err := f.publish(tmp, dir, &m, tensors); err != nil {
		return err
	}
	return f.barrier(ctx)
}

// stateTensors lists the parameters and the optimizer's moments as Save
// writes them, recording each moment's step in m; full gathers sharded
// moments whole, and so does a mesh, whose split tensors it gathers whole
// too (adding what it gathered to made).
func (f *Fabric) stateTensors(ctx context.Context, m *Manifest, full bool, made *[]*tensor.Tensor) (params, moments []checkpoint.Tensor, err error) {
	states, _ := f.opt.(adamStates)
	for i, p := range nn.Parameters(f.model) {
		if f.tensors == nil {
			params = append(params, f.whole(ctx, "model."+p.Path, i, p.Var.Value))
		} else {
			v, err := f.wholeParam(ctx, i, p)
			if err != nil {
				return nil, nil, fmt.Errorf("checkpoint: %w", err)
			}
			if v != p.Var.Value {
				*made = append(*made, v)
			}
			params = append(params, stored("model."+p.Path, v))
		}
		if states == nil {
			continue
		}
		st := states.State(p.Path)
		if st == nil {
			continue
		}
		m.OptimizerSteps[p.Path] = st.Step
		for _, mo := range []struct {
			suffix string
			t      *tensor.Tensor
		}{{".exp_avg", st.ExpAvg}, {".exp_avg_sq", st.ExpAvgSq}} {
			t := mo.t
			switch {
			case f.tensors != nil:
				if t, err = f.wholeMoment(ctx, p, t); err != nil {
					return nil, nil, fmt.Errorf("checkpoint: %w", err)
				}
				if t != mo.t {
					*made = append(*made, t)
				}
			case full && f.shardedOptimizer():
				if t, err = f.joinChunks(ctx, t, p.Var.Value.Shape()); err != nil {
					return nil, nil, err
				}
			}
			moments = append(moments, stored("optim."+p.Path+mo.suffix, t))
		}
	}
	return params, moments, nil
}

// joinChunks gathers every rank's chunk of a sharded moment into the whole
// tensor of the given shape.
func (f *Fabric) joinChunks(ctx context.Context, chunk *tensor.Tensor, shape []int) (*tensor.Tensor, error) {
	stacked, err := f.dist.JoinChunks(ctx, chunk) // the padded whole
	if err != nil {
		return nil, fmt.Errorf("checkpoint: gathering optimizer chunks: %w", err)
	}
	defer tensor.Free(stacked)
	whole := stacked.Flat(0, tensor.Numel(shape))
	defer tensor.FreeView(whole)
	return whole.Reshape(shape...).Clone(), nil
}

// publish writes rank 0's files of the checkpoint into tmp, then the
// manifest with every file's digests, and renames tmp to dir.
func (f *Fabric) publish(tmp, dir string, m *Manifest, tensors []checkpoint.Tensor) error {
	for name, st := range f.States() {
		b, err := st.MarshalState()
		if err != nil {
			return fmt.Errorf("checkpoint: precision state %s: %w", name, err)
		}
		m.Precision[name] = b
	}
	if err := checkpoint.WriteSafetensors(filepath.Join(tmp, stateFile), tensors, map[string]string{"format": CheckpointFormat}); err != nil {
		return err
	}
	m.Digests = map[string]checkpoint.Digest{}
	for _, name := range m.Files() {
		d, err := checkpoint.DigestSafetensors(filepath.Join(tmp, name))
		if err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		m.Digests[name] = d
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := checkpoint.WriteFileAtomic(filepath.Join(tmp, manifestFile), mb); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// whole is parameter i, value v, as the checkpoint stores it: whole, and
// under FSDP gathered only when the writer reaches it.
func (f *Fabric) whole(ctx context.Context, name string, i int, v *tensor.Tensor) checkpoint.Tensor {
	if !v.IsMeta() || f.dist == nil {
		return stored(name, v)
	}
	return checkpoint.Tensor{Name: name, DType: v.DType(), Shape: v.Shape(), Load: func() ([]byte, func(), error) {
		t, release, err := f.dist.Whole(ctx, i)
		if err != nil {
			return nil, nil, err
		}
		return t.Data(), release, nil
	}}
}

func stored(name string, t *tensor.Tensor) checkpoint.Tensor {
	return checkpoint.Tensor{Name: name, DType: t.DType(), Shape: t.Shape(), Data: t.Data()}
}

// Load restores the checkpoint folder dir into the model, the optimizer's
// moments, the precision state and the step count; every rank calls it.
// A checkpoint saved with another precision or strategy is converted, as
// Lightning does, and Loaded.Converted says how: parameters and moments
// are cast to the dtypes this fabric stores them in, sharded moments are
// joined and cut for this fabric's ranks, and the state of a plugin the
// checkpoint lacks starts fresh. A parameter of another shape, or a
// tensor that cannot be cast, is an error: the checkpoint is of another
// model.
func (f *Fabric) Load(dir string, opts LoadOptions) (*Loaded, error) {
	if f.model == nil {
		return nil, errors.New("fabric: Load before Setup")
	}
	ck, err := OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	m := ck.Manifest
	out := &Loaded{Manifest: m}
	fit := newFitter(ck.Dir, opts, out)
	param := func(name string, _ []int) (*tensor.Tensor, error) { return ck.Tensor(name) }
	states, _ := f.opt.(adamStates)
	// A strategy that shards re-cuts the values itself (Reshard, below, as
	// at setup); elsewhere the values Setup made go once the checkpoint's
	// replace them.
	resharded := f.shardedOptimizer()
	for i, p := range nn.Parameters(f.model) {
		v, ok, err := fit.take("model."+p.Path, f.wholeLike(p, p.Var.Value), "parameters", param)
		if err != nil {
			return nil, err
		}
		if ok {
			old := p.Var.Value
			if p.Var.Value, err = f.shareOf(p, v); err != nil {
				return nil, err
			}
			if !resharded && !tensor.SameStorage(old, p.Var.Value) {
				tensor.Drop(old)
			}
		}
		steps, stepped := m.OptimizerSteps[p.Path]
		if !stepped || states == nil {
			continue
		}
		like := p.Var.Value
		if f.stateDType != dtype.Invalid {
			like = tensor.Meta(f.stateDType, like.Shape()...)
		}
		like = f.wholeLike(p, like)
		st := &optim.AdamState{Step: steps}
		var avg, avgSq bool
		if st.ExpAvg, avg, err = fit.take("optim."+p.Path+".exp_avg", like, "optimizer moments", ck.Moment); err != nil {
			return nil, err
		}
		if st.ExpAvgSq, avgSq, err = fit.take("optim."+p.Path+".exp_avg_sq", like, "optimizer moments", ck.Moment); err != nil {
			return nil, err
		}
		if !avg || !avgSq {
			continue
		}
		if st.ExpAvg, err = f.shareOf(p, st.ExpAvg); err != nil {
			return nil, err
		}
		if st.ExpAvgSq, err = f.shareOf(p, st.ExpAvgSq); err != nil {
			return nil, err
		}
		if f.shardedOptimizer() {
			whole := [2]*tensor.Tensor{st.ExpAvg, st.ExpAvgSq}
			st.ExpAvg, st.ExpAvgSq = f.dist.Shard(i, st.ExpAvg), f.dist.Shard(i, st.ExpAvgSq)
			tensor.Free(whole[0]) // Shard copied this rank's chunk
			tensor.Free(whole[1])
		}
		if err := states.SetState(p.Path, st); err != nil {
			return nil, err
		}
	}
	if err := fit.unexpected(ck.state.Names()); err != nil {
		return nil, err
	}
	if resharded {
		f.dist.Reshard()
	}
	if err := f.loadPrecision(ck.Dir, m.Precision, out); err != nil {
		return nil, err
	}
	out.Converted = append(fit.casts(), out.Converted...)
	if note := f.reshardNote(m); note != "" {
		out.Converted = append(out.Converted, note)
	}
	f.steps = m.FabricSteps
	return out, nil
}

// loadPrecision restores every plugin's state; a plugin the checkpoint has
// no state for starts fresh, and state no plugin of this fabric takes is
// dropped, each said in out.Converted.
func (f *Fabric) loadPrecision(dir string, saved map[string]json.RawMessage, out *Loaded) error {
	used := map[string]bool{}
	var fresh []string
	for name, st := range f.States() {
		b, ok := saved[name]
		used[name] = true
		if !ok {
			fresh = append(fresh, name)
			continue
		}
		if err := st.UnmarshalState(b); err != nil {
			return fmt.Errorf("checkpoint %s: %w", dir, err)
		}
	}
	var dropped []string
	for name := range saved {
		if !used[name] {
			dropped = append(dropped, name)
		}
	}
	if len(fresh) > 0 {
		slices.Sort(fresh)
		out.Converted = append(out.Converted, "precision state "+strings.Join(fresh, ", ")+" starts fresh (the checkpoint has none)")
	}
	if len(dropped) > 0 {
		slices.Sort(dropped)
		out.Converted = append(out.Converted, "precision state "+strings.Join(dropped, ", ")+" dropped (no plugin of this run keeps it)")
	}
	return nil
}

// reshardNote says how sharded optimizer state was re-cut, "" if it was
// not.
func (f *Fabric) reshardNote(m *Manifest) string {
	now := 0
	if f.shardedOptimizer() {
		_, now = f.dist.Chunks()
	}
	switch was := m.OptimizerShards; {
	case len(m.OptimizerSteps) == 0 || was == now:
		return ""
	case was == 0:
		return fmt.Sprintf("optimizer state sharded over %d ranks", now)
	case now == 0:
		return fmt.Sprintf("optimizer state joined from %d ranks' shards", was)
	default:
		return fmt.Sprintf("optimizer state resharded from %d to %d ranks", was, now)
	}
}

// LoadRaw loads a plain safetensors file of weights, keyed by parameter
// path ("blocks.0.qkv.weight"), into m and nothing else: no optimizer or
// precision state. When m is this fabric's model after Setup, its shards
// are cut anew from what was loaded. Weights are cast to m's dtypes
// (Loaded.Converted says so); opts.Partial reports missing and unexpected
// keys instead of failing.
func (f *Fabric) LoadRaw(path string, m nn.Module, opts LoadOptions) (*Loaded, error) {
	file, err := checkpoint.ReadSafetensors(path)
	if err != nil {
		return nil, fmt.Errorf("load raw: %w", err)
	}
	out := &Loaded{}
	fit := newFitter(path, opts, out)
	read := func(name string, _ []int) (*tensor.Tensor, error) { return fileTensor(file, path, name) }
	for _, p := range nn.Parameters(m) {
		v, ok, err := fit.take(p.Path, p.Var.Value, "parameters", read)
		if err != nil {
			return nil, err
		}
		if ok {
			p.Var.Value = v
		}
	}
	if err := fit.unexpected(file.Names()); err != nil {
		return nil, err
	}
	if f.dist != nil && m == f.model {
		f.dist.Reshard()
	}
	out.Converted = fit.casts()
	return out, nil
}

// fitter matches a checkpoint's tensors to a model's, casting floating
// tensors to the model's dtypes and counting each kind of cast.
type fitter struct {
	src   string
	opts  LoadOptions
	out   *Loaded
	taken map[string]bool
	cast  map[castKind]int
	order []castKind
}

type castKind struct {
	what     string // "parameters", "optimizer moments"
	from, to dtype.DType
}

func newFitter(src string, opts LoadOptions, out *Loaded) *fitter {
	return &fitter{src: src, opts: opts, out: out, taken: map[string]bool{}, cast: map[castKind]int{}}
}

// take reads the tensor called name to stand in for like: in like's dtype
// (cast if it was saved in another floating dtype) and shape. ok is false
// when the file lacks it and the load is partial.
func (k *fitter) take(name string, like *tensor.Tensor, what string, read func(string, []int) (*tensor.Tensor, error)) (t *tensor.Tensor, ok bool, err error) {
	t, err = read(name, like.Shape())
	if errors.Is(err, errMissing) && k.opts.Partial {
		k.out.Missing = append(k.out.Missing, name)
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	k.taken[name] = true
	if !t.SameShape(like) {
		return nil, false, fmt.Errorf("checkpoint %s: %s has shape %v, the model's is %v: the checkpoint holds another model", k.src, name, t.Shape(), like.Shape())
	}
	if t.DType() == like.DType() {
		return t, true, nil
	}
	if !t.DType().IsFloat() || !like.DType().IsFloat() {
		return nil, false, fmt.Errorf("checkpoint %s: %s is %s, the model needs %s, and only floating tensors are cast", k.src, name, t.DType(), like.DType())
	}
	kind := castKind{what, t.DType(), like.DType()}
	if k.cast[kind] == 0 {
		k.order = append(k.order, kind)
	}
	k.cast[kind]++
	cast := t.To(like.DType())
	tensor.Free(t)
	return cast, true, nil
}

// unexpected fails a strict load, or reports a partial one, for the
// file's tensors that nothing took.
func (k *fitter) unexpected(names []string) error {
	var left []string
	for _, n := range names {
		if !k.taken[n] {
			left = append(left, n)
		}
	}
	if len(left) == 0 {
		return nil
	}
	if !k.opts.Partial {
		return &UnexpectedError{Src: k.src, Names: left}
	}
	k.out.Unexpected = left
	return nil
}

// casts is one line per kind of cast done, in the order first met.
func (k *fitter) casts() []string {
	var lines []string
	for _, c := range k.order {
		lines = append(lines, fmt.Sprintf("cast %d %s %s→%s", k.cast[c], c.what, c.from, c.to))
	}
	return lines
}

// UnexpectedError is a strict load's refusal of a checkpoint holding
// tensors that match nothing of the model (a partial load skips them).
type UnexpectedError struct {
	Src   string   // the checkpoint folder or file
	Names []string // the tensors nothing took
}

func (e *UnexpectedError) Error() string {
	return fmt.Sprintf("checkpoint %s: %d tensors match nothing of the model (%s); load it partially (strict off) to skip them", e.Src, len(e.Names), e.FirstNames())
}

// FirstNames lists the first few of the tensors nothing took.
func (e *UnexpectedError) FirstNames() string { return firstFew(e.Names) }

func firstFew(names []string) string {
	if len(names) > 3 {
		return strings.Join(names[:3], ", ") + ", ..."
	}
	return strings.Join(names, ", ")
}

// errMissing marks a tensor a file lacks (a partial load skips it).
var errMissing = errors.New("missing")

// Checkpoint is a checkpoint folder opened for reading, every file checked
// against the manifest's digests.
type Checkpoint struct {
	Manifest *Manifest
	Dir      string
	state    *checkpoint.File
	shards   []*checkpoint.File // the optimizer's, in rank order
}

// OpenCheckpoint opens the checkpoint folder dir.
func OpenCheckpoint(dir string) (*Checkpoint, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	ck := &Checkpoint{Manifest: m, Dir: dir}
	for i, name := range m.Files() {
		f, err := OpenVerified(dir, m, name)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			ck.state = f
		} else {
			ck.shards = append(ck.shards, f)
		}
	}
	return ck, nil
}

// Names lists the tensors of state.safetensors.
func (c *Checkpoint) Names() []string { return c.state.Names() }

// Tensor reads a tensor of state.safetensors.
func (c *Checkpoint) Tensor(name string) (*tensor.Tensor, error) {
	return fileTensor(c.state, c.Dir, name)
}

func fileTensor(f *checkpoint.File, src, name string) (*tensor.Tensor, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: tensor %s is %w", src, name, errMissing)
	}
	return tensor.FromBytes(t.DType, t.Data, t.Shape...)
}

// Moment reads a whole optimizer moment of the given shape: from
// state.safetensors, or joined from every rank's chunks.
func (c *Checkpoint) Moment(name string, shape []int) (*tensor.Tensor, error) {
	if len(c.shards) == 0 {
		return c.Tensor(name)
	}
	var whole []byte
	dt := dtype.Invalid
	for r, f := range c.shards {
		t, ok := f.Tensor(name)
		if !ok && r == 0 {
			return nil, fmt.Errorf("checkpoint %s: tensor %s is %w", c.Dir, name, errMissing)
		}
		if !ok || (dt != dtype.Invalid && t.DType != dt) {
			return nil, fmt.Errorf("checkpoint %s: %s lacks %s (or holds it in another dtype)", c.Dir, shardFile(r), name)
		}
		dt = t.DType
		whole = append(whole, t.Data...)
	}
	size := dt.StorageBytes(tensor.Numel(shape))
	if len(whole) < size {
		return nil, fmt.Errorf("checkpoint %s: the chunks of %s hold %d bytes, the tensor %d", c.Dir, name, len(whole), size)
	}
	return tensor.FromBytes(dt, whole[:size], shape...)
}

// Consolidate writes checkpoint folder dir as one safetensors file at out:
// parameters and whole AdamW moments, the optimizer shards joined.
func Consolidate(dir, out string) error {
	ck, err := OpenCheckpoint(dir)
	if err != nil {
		return err
	}
	var tensors []checkpoint.Tensor
	for _, name := range ck.state.Names() {
		t, _ := ck.state.Tensor(name)
		tensors = append(tensors, t)
		path, ok := strings.CutPrefix(name, "model.")
		if _, stepped := ck.Manifest.OptimizerSteps[path]; !ok || !stepped || len(ck.shards) == 0 {
			continue
		}
		for _, which := range []string{".exp_avg", ".exp_avg_sq"} {
			whole, err := ck.Moment("optim."+path+which, t.Shape)
			if err != nil {
				return err
			}
			tensors = append(tensors, stored("optim."+path+which, whole))
		}
	}
	return checkpoint.WriteSafetensors(out, tensors, map[string]string{"format": CheckpointFormat, "step": fmt.Sprint(ck.Manifest.Step)})
}

// Files names the checkpoint's safetensors files: state.safetensors, then
// the optimizer shards in rank order.
func (m *Manifest) Files() []string {
	names := []string{stateFile}
	for r := range m.OptimizerShards {
		names = append(names, shardFile(r))
	}
	return names
}

// ReadManifest reads and checks the manifest of checkpoint folder dir.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	m, err := ParseManifest(b)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return m, nil
}

// ParseManifest reads and checks a manifest.json.
func ParseManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if m.Format != CheckpointFormat {
		return nil, fmt.Errorf("manifest: format %q, want %q", m.Format, CheckpointFormat)
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

// OpenVerified reads the file called name of checkpoint folder dir, whose
// manifest is m, and checks it against m's digests.
func OpenVerified(dir string, m *Manifest, name string) (*checkpoint.File, error) {
	path := filepath.Join(dir, name)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint %s: %s is missing, though the manifest lists it", dir, name)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	f, err := checkpoint.ParseSafetensors(raw)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return f, m.verify(dir, name, f, raw)
}

// verify checks a file of checkpoint dir against its digest in the
// manifest, naming the first tensor that differs.
func (m *Manifest) verify(dir, name string, f *checkpoint.File, raw []byte) error {
	want, ok := m.Digests[name]
	if !ok {
		return fmt.Errorf("checkpoint %s: the manifest has no digest of %s", dir, name)
	}
	got := digest(f, raw)
	for _, t := range f.Names() {
		if got.Tensors[t] != want.Tensors[t] {
			return fmt.Errorf("checkpoint %s: tensor %s of %s does not match its SHA-256 in the manifest (the file is corrupt, was changed, or comes from another checkpoint)", dir, t, name)
		}
	}
	if got.File != want.File || len(got.Tensors) != len(want.Tensors) {
		return fmt.Errorf("checkpoint %s: %s does not match its SHA-256 in the manifest (the file is corrupt, was changed, or comes from another checkpoint)", dir, name)
	}
	return nil
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
