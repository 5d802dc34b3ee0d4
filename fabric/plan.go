package fabric

import (
	"fmt"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/strategy"
)

// Bytes is a per-rank memory account.
type Bytes struct {
	Params         int64 `json:"params"`
	Grads          int64 `json:"grads"`
	OptimizerState int64 `json:"optimizer_state"`
}

func (b *Bytes) add(o Bytes) {
	b.Params += o.Params
	b.Grads += o.Grads
	b.OptimizerState += o.OptimizerState
}

// ModulePlan is one module's resolved precision and memory.
type ModulePlan struct {
	Path    string   `json:"path"`
	Kind    string   `json:"kind"`
	Plugins []string `json:"plugins"` // the module's plugin stack
	Params  int      `json:"params"`  // elements of its own parameters
	Storage string   `json:"storage"`
	// Compute is the dtype each op class runs in: gemm (linear, matmul,
	// conv2d), norm (layer_norm, softmax, losses) and elementwise.
	Compute       map[string]string `json:"compute"`
	Communication string            `json:"communication"` // gather and reduce dtype
	BytesPerRank  Bytes             `json:"bytes_per_rank"`
}

// Plan is what a run would do, resolved without running it.
type Plan struct {
	Precision    string       `json:"precision"`
	Rules        []string     `json:"precision_for,omitempty"`
	Strategy     string       `json:"strategy"`
	Devices      int          `json:"devices"`
	LossScaling  string       `json:"loss_scaling"`
	Modules      []ModulePlan `json:"modules"`
	BytesPerRank Bytes        `json:"bytes_per_rank"`
}

// adamMoments is the number of optimizer-state tensors per parameter (AdamW's m and v).
const adamMoments = 2

// MakePlan resolves pol over m for strategy on devices ranks and accounts
// the bytes each rank holds, without converting m.
func MakePlan(m nn.Module, pol precision.Policy, scaling precision.LossScaling, strategyName string, devices int) (*Plan, error) {
	st, err := strategy.Lookup(strategyName)
	if err != nil {
		return nil, err
	}
	if devices < 1 {
		return nil, fmt.Errorf("--devices %d: must be at least 1", devices)
	}
	res, err := pol.Resolve(m, scaling)
	if err != nil {
		return nil, err
	}
	p := &Plan{Precision: pol.Default.String(), Strategy: st.Name, Devices: devices, LossScaling: "none"}
	for _, r := range pol.Rules {
		p.Rules = append(p.Rules, r.Pattern+"="+r.Spec.String())
	}
	if res.ScalesLoss() {
		p.LossScaling = fmt.Sprintf("dynamic, scale %g", res.Scaler.Scale())
	}
	for _, s := range res.Scopes {
		mp := planModule(s, st.Sharding, devices)
		p.BytesPerRank.add(mp.BytesPerRank)
		p.Modules = append(p.Modules, mp)
	}
	return p, nil
}

func planModule(s precision.Scope, sh strategy.Sharding, n int) ModulePlan {
	storage := dtype.F32
	if dt, ok := precision.StorageDType(s.Plugin); ok {
		storage = dt
	}
	state := storage
	if dt, ok := precision.OptimizerStateDType(s.Plugin); ok {
		state = dt
	}
	gemm := computeDType(s.Plugin, autograd.OpLinear, storage)
	mp := ModulePlan{
		// Strategies gather parameters and reduce gradients in the storage dtype.
		Path: s.Path, Kind: s.Kind, Storage: storage.String(), Communication: storage.String(),
		Compute: map[string]string{
			"gemm":        gemm.String(),
			"norm":        computeDType(s.Plugin, autograd.OpLayerNorm, storage).String(),
			"elementwise": computeDType(s.Plugin, autograd.OpGELU, gemm).String(),
		},
	}
	for _, m := range precision.Members(s.Plugin) {
		mp.Plugins = append(mp.Plugins, m.Name())
	}
	for _, p := range s.Module.Params() {
		n64 := int64(p.Var.Value.Len())
		mp.Params += p.Var.Value.Len()
		mp.BytesPerRank.add(Bytes{
			Params:         strategy.PerRank(int64(storage.StorageBytes(int(n64))), sh.Parameters, n),
			Grads:          strategy.PerRank(int64(storage.StorageBytes(int(n64))), sh.Gradients, n),
			OptimizerState: strategy.PerRank(adamMoments*int64(state.StorageBytes(int(n64))), sh.OptimizerState, n),
		})
	}
	return mp
}

// computeDType is the dtype op runs in under p for inputs of dtype in.
func computeDType(p precision.Plugin, op autograd.Op, in dtype.DType) dtype.DType {
	if a := precision.Autocast(p); a != nil {
		return a.CastInput(op, in)
	}
	return in
}
