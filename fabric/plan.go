package fabric

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim/lowbit"
	"github.com/weftml/weft/parallel"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/quant"
	"github.com/weftml/weft/strategy"
	"github.com/weftml/weft/tensor"
)

// Bytes is a per-rank memory account.
type Bytes struct {
	Params int64 `json:"params"` // trainable parameters
	// Frozen counts weights that no gradient reaches (quantized codes and
	// their constants); every rank holds them whole.
	Frozen         int64 `json:"frozen"`
	Grads          int64 `json:"grads"`
	OptimizerState int64 `json:"optimizer_state"`
}

func (b *Bytes) add(o Bytes) {
	b.Params += o.Params
	b.Frozen += o.Frozen
	b.Grads += o.Grads
	b.OptimizerState += o.OptimizerState
}

// ModulePlan is one module's resolved precision and memory after the
// conversion training does.
type ModulePlan struct {
	Path    string   `json:"path"`
	Kind    string   `json:"kind"`
	Plugins []string `json:"plugins"` // the module's plugin stack
	// Converted says which plugins replaced the module's arithmetic and
	// how: "fp8 GEMMs", "nf4-dq (weight frozen)"; "" for none.
	Converted string `json:"converted,omitempty"`
	Params    int    `json:"params"`           // elements of its own trainable parameters
	Frozen    int    `json:"frozen,omitempty"` // elements of its frozen weight
	// Storage lists the formats of its own tensors, frozen weight first
	// ("nf4-dq(packed)/bfloat16"); a module without any shows its
	// plugin's storage dtype.
	Storage string `json:"storage"`
	// Compute is the dtype each op class runs in: gemm (linear, matmul,
	// conv2d), norm (layer_norm, softmax, losses) and elementwise.
	Compute map[string]string `json:"compute"`
	// Communication lists the dtypes its parameters travel in: gathers
	// (FSDP: an FP8 recipe's weights as float8_e4m3fn) and gradient
	// reductions.
	Communication string `json:"communication"`
	BytesPerRank  Bytes  `json:"bytes_per_rank"`
}

// Plan is what a run would do, resolved and converted without running it.
type Plan struct {
	Precision    string       `json:"precision"`
	Rules        []string     `json:"precision_for,omitempty"`
	Strategy     string       `json:"strategy"`
	Devices      int          `json:"devices"`
	LossScaling  string       `json:"loss_scaling"`
	Modules      []ModulePlan `json:"modules"`
	BytesPerRank Bytes        `json:"bytes_per_rank"`
	// Warnings are what the conversion left undone that a user should
	// hear of (precision.Resolution.Warnings).
	Warnings []string `json:"warnings,omitempty"`
	// ActivationCheckpointing names the modules PredictPeak takes as
	// checkpointed (Config.ActivationCheckpointing).
	ActivationCheckpointing []string `json:"activation_checkpointing,omitempty"`
	// MicroBatches is the gradient accumulation PredictPeak takes:
	// each step's batch runs as this many micro-batches (0 and 1: whole).
	MicroBatches int `json:"micro_batches,omitempty"`
	// TensorParallel is the ranks of a mesh row that split the model
	// (SplitBy); 0 without tensor parallelism. Devices counts the
	// strategy's data-parallel ranks.
	TensorParallel int `json:"tensor_parallel,omitempty"`
	// Adapters are the parameters that alone train (LoRA's, by
	// precision.Trainer): everything else is frozen.
	Adapters []Adapter `json:"adapters,omitempty"`
	// Peak is each rank's predicted allocator peak over a training step
	// (PredictPeak); nil until predicted.
	Peak *Peak `json:"peak_per_rank,omitempty"`
	// ShardSize is the ranks of a shard group under hsdp (ShardWithin),
	// over which its bytes per rank are split; 0 for other strategies.
	ShardSize int `json:"shard_size,omitempty"`
	// Traffic is what each rank sends in a step (PredictTraffic); nil
	// until predicted.
	Traffic *Traffic `json:"traffic_per_step,omitempty"`
	// model and res are the converted model and its resolution, which
	// PredictPeak runs a pass of; tensors is the model's tensor-parallel
	// layout (SplitBy), nil if whole.
	model   nn.Module
	res     *precision.Resolution
	tensors *parallel.Layout
}

// Adapter is a trained parameter added beside frozen weights.
type Adapter struct {
	Path  string `json:"path"` // blocks.0.qkv.lora_A.weight
	Shape []int  `json:"shape"`
	Bytes int64  `json:"bytes"` // of its value
}

// SplitBy tells the plan that its model is split by l (as Setup splits
// it by Config.TensorPlan), so that PredictPeak's pass runs the layout's
// sequence-parallel modules on shares of the sequence as training does.
func (p *Plan) SplitBy(l *parallel.Layout) {
	p.tensors = l
	p.TensorParallel = l.Group.Size()
}

// Layout is the tensor-parallel layout SplitBy gave, nil if whole.
func (p *Plan) Layout() *parallel.Layout { return p.tensors }

// adamMoments is the number of optimizer-state tensors per parameter (AdamW's m and v).
const adamMoments = 2

// prepare resolves pol over m and converts m for it: the one way from a
// policy to a model ready to train, which Setup and MakePlan share, so
// that a plan refuses what training refuses with the same error. check,
// if not nil, vets the resolution before m changes.
func prepare(m nn.Module, pol precision.Policy, scaling precision.LossScaling, check func(*precision.Resolution) error) (*precision.Resolution, error) {
	res, err := pol.Resolve(m, scaling)
	if err != nil {
		return nil, err
	}
	if err := optimizerRolesAtRoot(res); err != nil {
		return nil, err
	}
	if check != nil {
		if err := check(res); err != nil {
			return nil, err
		}
	}
	if err := res.Convert(); err != nil {
		return nil, err
	}
	if trained, ok := precision.TrainedParams(res.Root); ok {
		freezeAllBut(m, trained)
	}
	return res, nil
}

// optimizerRolesAtRoot refuses a rule's plugin that asks the optimizer for
// something the whole model's precision does not (moments in a dtype or
// in 8-bit blocks, stochastic rounding): one optimizer steps every
// parameter, as the root plugin says, and the rule's would be ignored.
func optimizerRolesAtRoot(res *precision.Resolution) error {
	root := optimizerRoles(res.Root)
	for _, s := range res.Scopes {
		if r := optimizerRoles(s.Plugin); r != "" && r != root {
			return fmt.Errorf("precision %s at %s asks the optimizer for %s, which applies to the whole model: give it in --precision, not in a --precision-for rule", s.Plugin.Name(), cmp.Or(s.Path, "the root"), r)
		}
	}
	return nil
}

// optimizerRoles says what p asks of the optimizer, "" for nothing.
func optimizerRoles(p precision.Plugin) string {
	var asks []string
	if dt, ok := precision.OptimizerStateDType(p); ok {
		asks = append(asks, "moments in "+dt.String())
	}
	if fm := precision.OptimizerFormat(p); fm != nil {
		asks = append(asks, fm.String())
	}
	if precision.RoundsStochastically(p) {
		asks = append(asks, "stochastic rounding of bfloat16 updates")
	}
	return strings.Join(asks, " and ")
}

// freezeAllBut stops gradients at every parameter of m but trained.
func freezeAllBut(m nn.Module, trained []nn.NamedParam) {
	keep := map[*autograd.Var]bool{}
	for _, p := range trained {
		keep[p.Var] = true
	}
	for _, p := range nn.Parameters(m) {
		if !keep[p.Var] {
			p.Var.Freeze()
		}
	}
}

// MakePlan converts m for pol as Setup does and accounts the bytes each
// rank holds for strategy on devices ranks. m is converted in place: build
// it on shapes alone (nn.Meta, models.NewMeta) to plan without memory for
// its weights, and give training a model of its own.
func MakePlan(m nn.Module, pol precision.Policy, scaling precision.LossScaling, strategyName string, devices int) (*Plan, error) {
	st, err := strategy.Lookup(strategyName)
	if err != nil {
		return nil, err
	}
	if devices < 1 {
		return nil, fmt.Errorf("--devices %d: must be at least 1", devices)
	}
	var check func(*precision.Resolution) error
	if devices > 1 || st.Sharding.OptimizerState { // as New places a strategy
		check = gathersSome(st, nil)
	}
	res, err := prepare(m, pol, scaling, check)
	if err != nil {
		return nil, err
	}
	p := &Plan{Precision: pol.Default.String(), Strategy: st.Name, Devices: devices, LossScaling: "none", Warnings: res.Warnings, model: m, res: res}
	for _, r := range pol.Rules {
		p.Rules = append(p.Rules, r.Pattern+"="+r.Spec.String())
	}
	if res.ScalesLoss() {
		p.LossScaling = fmt.Sprintf("dynamic, scale %g", res.Scaler.Scale())
	}
	p.listAdapters(res)
	p.account(st.Sharding, devices)
	return p, nil
}

// account plans every module, its bytes per rank those of sharding sh
// over n ranks.
func (p *Plan) account(sh strategy.Sharding, n int) {
	// Setup gives the optimizer the root plugin's state dtype, for every parameter.
	state, setsState := precision.OptimizerStateDType(p.res.Root)
	ranks := ranks{sh: sh, n: n, tied: tiedParams(p.res), stateFormat: precision.OptimizerFormat(p.res.Root)}
	p.Modules, p.BytesPerRank = nil, Bytes{}
	for _, s := range p.res.Scopes {
		mp := ranks.planModule(s, state, setsState)
		p.BytesPerRank.add(mp.BytesPerRank)
		p.Modules = append(p.Modules, mp)
	}
}

// listAdapters fills p.Adapters with res's trained parameters (each a
// parameter of the Linear it adapts too, nn.ParamGEMM).
func (p *Plan) listAdapters(res *precision.Resolution) {
	trained, _ := precision.TrainedParams(res.Root)
	for _, q := range trained {
		v := q.Var.Value
		p.Adapters = append(p.Adapters, Adapter{Path: q.Path, Shape: v.Shape(), Bytes: int64(v.Bytes())})
	}
}

// ranks is how a strategy splits what a module holds over n ranks.
type ranks struct {
	sh   strategy.Sharding
	n    int
	tied map[*autograd.Var]bool // tiedParams
	// stateFormat is the low-bit optimizer state's (nil: float moments).
	stateFormat *lowbit.Format
}

// paramBytes is what a rank holds of trained parameter v (its value, its
// gradient and AdamW's moments, in state if setsState): the ceil(1/n) of
// what is sharded, or, under low-bit optimizer state that is sharded, its
// chunk of whole blocks (strategy.Options.StateBlock), the first rank's,
// whose state holds the most (none is kept for padding).
func (rk ranks) paramBytes(v *tensor.Tensor, state dtype.DType, setsState bool) Bytes {
	perRank := func(b int64, sharded bool) int64 { return strategy.PerRank(b, sharded, rk.n) }
	if fm := rk.stateFormat; fm != nil {
		part := v.Len() // the optimizer's elements
		if rk.sh.OptimizerState {
			chunk := strategy.Chunk(v.Len(), fm.Block, rk.n)
			part = min(chunk, v.Len()) // the first rank's: state stops where v does
			perRank = func(b int64, sharded bool) int64 {
				if !sharded {
					return b
				}
				return b / int64(v.Len()) * int64(chunk)
			}
		}
		return Bytes{ // codes and a float32 a block
			Params:         perRank(int64(v.Bytes()), rk.sh.Parameters),
			Grads:          perRank(int64(v.Bytes()), rk.sh.Gradients),
			OptimizerState: adamMoments * fm.Bytes(part),
		}
	}
	moments := int64(v.Bytes())
	if setsState {
		moments = int64(state.StorageBytes(v.Len()))
	}
	return Bytes{
		Params:         perRank(int64(v.Bytes()), rk.sh.Parameters),
		Grads:          perRank(int64(v.Bytes()), rk.sh.Gradients),
		OptimizerState: perRank(adamMoments*moments, rk.sh.OptimizerState),
	}
}

func (rk ranks) planModule(s precision.Scope, state dtype.DType, setsState bool) ModulePlan {
	storage := dtype.F32
	if dt, ok := precision.StorageDType(s.Plugin); ok {
		storage = dt
	}
	mp := computeOf(s, storage)
	var formats, wire []string
	if l, ok := s.Module.(*nn.Linear); ok {
		if w, ok := quant.WeightOf(l); ok {
			format := w.Format()
			if _, packed := w.(*quant.Blockwise); packed {
				format += "(packed)"
			}
			formats = append(formats, format)
			mp.Frozen = tensor.Numel(w.Shape())
			mp.BytesPerRank.Frozen = int64(w.Bytes())
			if rk.sh.Parameters { // FSDP keeps a chunk of the codes; the constants stay whole
				for _, fz := range nn.FrozenOf(l) {
					codes := *fz.Value
					mp.BytesPerRank.Frozen += int64(codes.DType().StorageBytes(strategy.Chunk(codes.Len(), fz.Block, rk.n)) - codes.Bytes())
				}
			}
		}
	}
	mp.Converted = describeConversion(s, mp.Frozen > 0)
	for _, p := range s.Module.Params() {
		v := p.Var.Value
		if !p.Var.RequiresGrad() { // beside adapters: a value and nothing else
			mp.Frozen += v.Len()
			mp.BytesPerRank.Frozen += strategy.PerRank(int64(v.Bytes()), rk.sh.Parameters, rk.n)
			formats = appendNew(formats, v.DType().String())
			continue
		}
		mp.Params += v.Len()
		formats = appendNew(formats, v.DType().String())
		on, reduced := v.DType(), v.DType()
		if dt, _, ok := gatherFormat(s, p, rk.tied); ok && rk.sh.Parameters && rk.n > 1 {
			on = dt
		}
		if c := gatherCodec(s, p, strategy.ForwardGEMMs); c != nil && rk.sh.Parameters && rk.n > 1 {
			on = c.DType()
		}
		if dt, ok := precision.ReduceDType(s.Plugin, nn.Join(s.Path, p.Name)); ok && rk.n > 1 {
			reduced = dt
		}
		wire = appendNew(appendNew(wire, on.String()), reduced.String())
		mp.BytesPerRank.add(rk.paramBytes(v, state, setsState))
	}
	if len(formats) == 0 {
		formats = []string{storage.String()}
	}
	if len(wire) == 0 {
		wire = []string{storage.String()}
	}
	mp.Storage, mp.Communication = strings.Join(formats, "/"), strings.Join(wire, "/")
	return mp
}

// computeOf is the module plan of s before its bytes: its plugins and the
// dtype each op class computes in, with storage the module's.
func computeOf(s precision.Scope, storage dtype.DType) ModulePlan {
	gemm := computeDType(s.Plugin, autograd.OpLinear, storage)
	gemmName := gemm.String()
	if l, ok := s.Module.(*nn.Linear); ok {
		if c, ok := l.GEMM.(nn.CastingGEMM); ok { // FP8: its operands' dtypes, forward/backward
			fwd, bwd := c.Operands()
			gemmName = fwd.String() + "/" + bwd.String()
		}
	}
	mp := ModulePlan{
		Path: s.Path, Kind: s.Kind,
		Compute: map[string]string{
			"gemm":        gemmName,
			"norm":        computeDType(s.Plugin, autograd.OpLayerNorm, storage).String(),
			"elementwise": computeDType(s.Plugin, autograd.OpGELU, gemm).String(),
		},
	}
	for _, m := range precision.Members(s.Plugin) {
		mp.Plugins = append(mp.Plugins, m.Name())
	}
	return mp
}

// describeConversion says which members of s's plugin replaced its
// module's arithmetic, and how.
func describeConversion(s precision.Scope, frozen bool) string {
	if len(s.Converted) == 0 {
		return ""
	}
	names := strings.Join(s.Converted, "+")
	if frozen {
		return names + " (weight frozen)"
	}
	return names + " GEMMs"
}

// appendNew appends s to list unless list holds it already.
func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// computeDType is the dtype op runs in under p for inputs of dtype in.
func computeDType(p precision.Plugin, op autograd.Op, in dtype.DType) dtype.DType {
	if a := precision.Autocast(p); a != nil {
		return a.CastInput(op, in)
	}
	return in
}
