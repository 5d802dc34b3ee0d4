package fabric

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/optim/lowbit"
	"github.com/weftml/weft/tensor"
)

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
	Manifest *checkpoint.Manifest // nil after LoadRaw
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
// than one whole parameter beyond its chunks. It tells
// Config.OnCheckpoint.
func (f *Fabric) Save(ctx context.Context, dir string, opts SaveOptions) error {
	if err := f.save(ctx, dir, opts); err != nil {
		return err
	}
	if err := f.cfg.OnCheckpoint(opts.Step, dir); err != nil {
		return fmt.Errorf("fabric: OnCheckpoint: %w", err)
	}
	return nil
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
	m := checkpoint.Manifest{Format: checkpoint.Format, Step: opts.Step, OptimizerSteps: map[string]int{},
		Precision: map[string]json.RawMessage{}, FabricSteps: f.steps, LowBitShares: f.lowBitShares()}
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
			if err := checkpoint.WriteSafetensors(filepath.Join(tmp, checkpoint.ShardFile(chunk)), moments, nil); err != nil {
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
func (f *Fabric) stateTensors(ctx context.Context, m *checkpoint.Manifest, full bool, made *[]*tensor.Tensor) (params, moments []checkpoint.Tensor, err error) {
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
		if st.Quantized() {
			lowBit, err := f.lowBitTensors(ctx, full, i, p, st, made)
			if err != nil {
				return nil, nil, err
			}
			moments = append(moments, lowBit...)
			continue
		}
		for _, mo := range []struct {
			suffix string
			t      *tensor.Tensor
		}{{".exp_avg", st.ExpAvg}, {".exp_avg_sq", st.ExpAvgSq}} {
			t := mo.t
			switch {
			case f.tensors != nil:
				if t, err = f.wholeMoment(ctx, i, p, t); err != nil {
					return nil, nil, fmt.Errorf("checkpoint: %w", err)
				}
				if t != mo.t {
					*made = append(*made, t)
				}
			case full && f.shardedOptimizer():
				if t, err = f.joinChunks(ctx, i, 1, t, p.Var.Value.Shape()); err != nil {
					return nil, nil, err
				}
			}
			moments = append(moments, stored("optim."+p.Path+mo.suffix, t))
		}
	}
	return params, moments, nil
}

// lowBitTensors are the low-bit moments st of parameter i, p, as Save
// writes them: codes and scales, a sharded optimizer's chunks joined when
// full or on a mesh; and on a mesh, for a split parameter, every rank's
// share's state stacked along a new first axis (parallel.Layout.Stack),
// its blocks being the share's: such a checkpoint resumes on the same
// tensor-parallel size alone. What they gathered is added to made.
func (f *Fabric) lowBitTensors(ctx context.Context, full bool, i int, p nn.NamedParam, st *optim.AdamState, made *[]*tensor.Tensor) ([]checkpoint.Tensor, error) {
	fm := f.stateFormat
	shape := p.Var.Value.Shape() // the share's on a mesh
	var out []checkpoint.Tensor
	for _, mo := range lowBitParts(fm, st, shape) {
		t := mo.t
		if f.shardedOptimizer() && (full || f.tensors != nil) {
			var err error
			if t, err = f.joinChunks(ctx, i, mo.per, t, mo.shape); err != nil {
				return nil, err
			}
			*made = append(*made, t)
		}
		if f.tensors != nil && f.tensors.Splits(p.Path) {
			stacked, err := f.tensors.Stack(ctx, t)
			if err != nil {
				return nil, fmt.Errorf("checkpoint: %w", err)
			}
			t = stacked
			*made = append(*made, t)
		}
		out = append(out, stored("optim."+p.Path+mo.suffix, t))
	}
	return out, nil
}

// lowBitPart is one of the four tensors of a parameter's low-bit moments.
type lowBitPart struct {
	suffix string         // of its name in a checkpoint
	t      *tensor.Tensor // st's
	per    int            // elements of the parameter a value of it stands for
	shape  []int          // whole, for a parameter of the given shape
	dt     dtype.DType
}

// lowBitParts lists st's codes and scales in format fm for a parameter of
// shape: the codes as .exp_avg and .exp_avg_sq, the scales as
// .exp_avg_absmax or .exp_avg_scale (fm.Scale) and their _sq twin.
func lowBitParts(fm *lowbit.Format, st *optim.AdamState, shape []int) []lowBitPart {
	codes, blocks := fm.CodeShape(shape), []int{fm.Blocks(tensor.Numel(shape))}
	return []lowBitPart{
		{".exp_avg", st.ExpAvg, fm.PerByte, codes, fm.CodeDType},
		{".exp_avg_sq", st.ExpAvgSq, fm.PerByte, codes, fm.CodeDType},
		{".exp_avg_" + fm.Scale, st.ExpAvgScale, fm.Block, blocks, dtype.F32},
		{".exp_avg_sq_" + fm.Scale, st.ExpAvgSqScale, fm.Block, blocks, dtype.F32},
	}
}

// joinChunks gathers every rank's chunk of a sharded moment of parameter
// i, one value per block elements of it, into the whole tensor of the
// given shape. Low-bit state holds no padding: its chunks are padded here.
func (f *Fabric) joinChunks(ctx context.Context, i, block int, chunk *tensor.Tensor, shape []int) (*tensor.Tensor, error) {
	if _, _, n := f.dist.Part(i); chunk.Len() < n/block {
		padded := tensor.New(chunk.DType(), n/block)
		copy(padded.Data(), chunk.Data())
		defer tensor.Free(padded)
		chunk = padded
	}
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
func (f *Fabric) publish(tmp, dir string, m *checkpoint.Manifest, tensors []checkpoint.Tensor) error {
	for name, st := range f.States() {
		b, err := st.MarshalState()
		if err != nil {
			return fmt.Errorf("checkpoint: precision state %s: %w", name, err)
		}
		m.Precision[name] = b
	}
	if err := checkpoint.WriteSafetensors(filepath.Join(tmp, checkpoint.StateFile), tensors, map[string]string{"format": checkpoint.Format}); err != nil {
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
	if err := checkpoint.WriteFileAtomic(filepath.Join(tmp, checkpoint.ManifestFile), mb); err != nil {
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
// under FSDP gathered only when the writer reaches it, exactly (v may be
// whole as its gather rounded it, strategy.Rank.Whole).
func (f *Fabric) whole(ctx context.Context, name string, i int, v *tensor.Tensor) checkpoint.Tensor {
	if f.dist == nil {
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
	ck, err := checkpoint.OpenFolder(dir)
	if err != nil {
		return nil, err
	}
	m := ck.Manifest
	out := &Loaded{Manifest: m}
	fit := newFitter(ck.Dir, opts, out)
	for i, p := range nn.Parameters(f.model) {
		if err := f.loadParam(ck, fit, p); err != nil {
			return nil, err
		}
		if err := f.loadMoments(ck, fit, i, p); err != nil {
			return nil, err
		}
	}
	if err := fit.unexpected(ck.Names()); err != nil {
		return nil, err
	}
	if f.shardedOptimizer() {
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

// loadParam gives parameter p the checkpoint's value, if it has one. A
// strategy that shards the optimizer re-cuts the values itself (Reshard,
// in Load, as at setup); elsewhere the value Setup made goes once the
// checkpoint's replaces it.
func (f *Fabric) loadParam(ck *checkpoint.Folder, fit *fitter, p nn.NamedParam) error {
	read := func(name string, _ []int) (*tensor.Tensor, error) { return fromStored(ck.Tensor(name)) }
	v, ok, err := fit.take("model."+p.Path, f.wholeLike(p, p.Var.Value), "parameters", read)
	if err != nil || !ok {
		return err
	}
	old := p.Var.Value
	if p.Var.Value, err = f.shareOf(p, v); err != nil {
		return err
	}
	if !f.shardedOptimizer() && !tensor.SameStorage(old, p.Var.Value) {
		tensor.Drop(old)
	}
	return nil
}

// loadMoments gives parameter i, p, the checkpoint's AdamW moments, if it
// has them and the optimizer keeps them: cast to the precision's
// optimizer-state dtype and cut to this rank's share.
func (f *Fabric) loadMoments(ck *checkpoint.Folder, fit *fitter, i int, p nn.NamedParam) error {
	states, _ := f.opt.(adamStates)
	steps, stepped := ck.Manifest.OptimizerSteps[p.Path]
	if !stepped || states == nil {
		return nil
	}
	read := func(name string, shape []int) (*tensor.Tensor, error) { return fromStored(ck.Moment(name, shape)) }
	st := &optim.AdamState{Step: steps}
	if f.stateFormat != nil {
		if saved, here := ck.Manifest.LowBitShares, f.lowBitShares(); saved != here {
			return lowBitSharesError(fit.src, saved, here)
		}
		ok, err := f.loadLowBit(fit, i, p, st, read)
		if err != nil || !ok {
			return err
		}
		return states.SetState(p.Path, st)
	}
	like := p.Var.Value
	if f.stateDType != dtype.Invalid {
		like = tensor.Meta(f.stateDType, like.Shape()...)
	}
	like = f.wholeLike(p, like)
	floats := func(name string, shape []int) (*tensor.Tensor, error) {
		t, err := read(name, shape)
		if err == nil && t.DType().Bits() <= 8 { // no float moments are this narrow: low-bit codes, which a cast would misread
			err = fmt.Errorf("checkpoint %s: %s holds %s codes of low-bit optimizer state (adamw8bit, adamw4bit, adamwfp8), and this run keeps float moments; resume with the precision that saved it", fit.src, name, t.DType())
			tensor.Free(t)
			return nil, err
		}
		return t, err
	}
	var avg, avgSq bool
	var err error
	if st.ExpAvg, avg, err = fit.take("optim."+p.Path+".exp_avg", like, "optimizer moments", floats); err != nil {
		return err
	}
	if st.ExpAvgSq, avgSq, err = fit.take("optim."+p.Path+".exp_avg_sq", like, "optimizer moments", floats); err != nil {
		return err
	}
	if !avg || !avgSq {
		return nil
	}
	if st.ExpAvg, err = f.shareOf(p, st.ExpAvg); err != nil {
		return err
	}
	if st.ExpAvgSq, err = f.shareOf(p, st.ExpAvgSq); err != nil {
		return err
	}
	if f.shardedOptimizer() {
		shard := func(t *tensor.Tensor) *tensor.Tensor { return f.dist.Shard(i, t) }
		cutChunk(&st.ExpAvg, shard, math.MaxInt)
		cutChunk(&st.ExpAvgSq, shard, math.MaxInt)
	}
	return states.SetState(p.Path, st)
}

// loadLowBit fills st with the checkpoint's low-bit moments of parameter
// i, p, as lowBitTensors wrote them: scales first, so that a checkpoint
// of float moments, which lacks them, is not cast to codes; this rank's
// share's state out of a split parameter's stack; this rank's chunk of
// whole blocks under a sharded optimizer. ok is false when a partial load
// lacks them.
func (f *Fabric) loadLowBit(fit *fitter, i int, p nn.NamedParam, st *optim.AdamState, read func(string, []int) (*tensor.Tensor, error)) (ok bool, err error) {
	shape := p.Var.Value.Shape() // the share's on a mesh
	split := f.tensors != nil && f.tensors.Splits(p.Path)
	parts := lowBitParts(f.stateFormat, st, shape)
	slots := []**tensor.Tensor{&st.ExpAvgScale, &st.ExpAvgSqScale, &st.ExpAvg, &st.ExpAvgSq}
	for k, mo := range []lowBitPart{parts[2], parts[3], parts[0], parts[1]} {
		whole := mo.shape
		if split {
			whole = append([]int{f.tensors.Group.Size()}, whole...)
		}
		t, ok, err := fit.take("optim."+p.Path+mo.suffix, tensor.Meta(mo.dt, whole...), "optimizer moments", read)
		if err != nil || !ok {
			return false, err
		}
		if split {
			own := f.tensors.Unstack(t)
			tensor.Free(t)
			t = own
		}
		if f.shardedOptimizer() {
			_, n, _ := f.dist.Part(i)
			cutChunk(&t, func(t *tensor.Tensor) *tensor.Tensor { return f.dist.ShardBlocks(i, t, mo.per) }, (n+mo.per-1)/mo.per)
		}
		*slots[k] = t
	}
	return true, nil
}

// lowBitShares is the tensor-parallel size whose shares' low-bit moments
// a checkpoint of f stacks (checkpoint.Manifest.LowBitShares).
func (f *Fabric) lowBitShares() int {
	if f.stateFormat == nil || f.tensors == nil {
		return 0
	}
	return f.tensors.Group.Size()
}

// lowBitSharesError says why low-bit moments saved over saved tensor-
// parallel shares (0: whole parameters) do not load over here.
func lowBitSharesError(src string, saved, here int) error {
	if saved == 0 {
		return fmt.Errorf("checkpoint %s holds no low-bit optimizer moments of tp %d shares (each blocked on its own), which this run keeps; resume it without --tp", src, here)
	}
	return fmt.Errorf("checkpoint %s holds low-bit optimizer moments of tp %d shares, each blocked on its own; resume it on --tp %d", src, saved, saved)
}

// cutChunk replaces *t, a whole tensor, by chunk's cut of it, n values at
// most: low-bit codes and scales stop where the parameter does
// (AdamW.SetStateElems).
func cutChunk(t **tensor.Tensor, chunk func(*tensor.Tensor) *tensor.Tensor, n int) {
	whole := *t
	*t = chunk(whole)
	tensor.Free(whole) // chunk copied this rank's
	if (*t).Len() > n {
		part := (*t).Flat(0, n)
		short := part.Clone()
		tensor.FreeView(part)
		tensor.Free(*t)
		*t = short
	}
}

// fromStored is a checkpoint's tensor as a tensor of its own.
func fromStored(t checkpoint.Tensor, err error) (*tensor.Tensor, error) {
	if err != nil {
		return nil, err
	}
	return tensor.FromBytes(t.DType, t.Data, t.Shape...)
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
func (f *Fabric) reshardNote(m *checkpoint.Manifest) string {
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
	read := func(name string, _ []int) (*tensor.Tensor, error) {
		t, ok := file.Tensor(name)
		if !ok {
			return nil, fmt.Errorf("checkpoint %s: tensor %s is %w", path, name, checkpoint.ErrMissing)
		}
		return tensor.FromBytes(t.DType, t.Data, t.Shape...)
	}
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
	if errors.Is(err, checkpoint.ErrMissing) && k.opts.Partial {
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
		return &checkpoint.UnexpectedError{Src: k.src, Names: left}
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
