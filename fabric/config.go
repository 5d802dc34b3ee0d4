package fabric

import (
	"errors"
	"fmt"
	"math"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/parallel"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/strategy"
)

// Config is a Fabric's settings, all given at once to New, which checks
// them together (as net/http.Server's fields, or Lightning's
// Fabric(strategy=, devices=, precision=)). The zero Config trains on one
// device in float32.
type Config struct {
	// Precision trains the whole model with one plugin, which then belongs
	// to the fabric (its state, a loss scale or amax histories, serves
	// this fabric's model alone). Set Precision or Policy, not both; with
	// neither the fabric trains in float32 ("32-true").
	Precision precision.Plugin
	// Policy gives each module the plugin its rules assign
	// (precision.ParsePolicy), built afresh for the model by Setup.
	Policy precision.Policy
	// LossScaling NoLossScaling refuses float16 compute instead of
	// scaling its loss.
	LossScaling precision.LossScaling
	// EvalPrecision, if set, is the plugin EvalLoss computes in over the
	// weights as training stores them (Lightning #20606: train in
	// bf16-mixed, evaluate in 32-true): its input, compute and output
	// casts for the whole model, in place of training's. Setup refuses
	// one that converts modules (fp8, quantized), one that stores
	// weights in another dtype than training does, and training that
	// converted modules, whose arithmetic an evaluation would still run.
	EvalPrecision precision.Plugin

	// Strategy names where parameters, gradients and optimizer state live
	// (strategy.Names: single, ddp, zero1, zero2, fsdp, hsdp); "" is
	// single. hsdp needs Sharding.Hybrid, its groups of the ranks it runs
	// over.
	Strategy string
	// Comm is this rank's communicator (comm.Open gives one per rank);
	// nil is one device. The Strategy runs over it, or over Mesh's column.
	Comm comm.Communicator
	// Mesh, if set, arranges Comm's ranks as rows that split the model by
	// TensorPlan at Setup (tensor parallelism) and columns that the
	// Strategy runs over; the loss scaler's inf/NaN check and every FP8
	// amax agree over all of Comm, so that every rank skips together and
	// uses one scale.
	Mesh       *comm.Mesh
	TensorPlan parallel.Plan
	// Sharding picks the strategy's sharding units and whether FSDP
	// regathers parameters for the backward.
	Sharding strategy.Options

	// ActivationCheckpointing names, in precision rules' syntax
	// ("blocks.*"), the modules whose forward is recomputed in backward
	// instead of keeping their activations (see autograd.Tape.Checkpoint).
	ActivationCheckpointing []string
	// Accumulation splits TrainStep's batch into micro-batches.
	Accumulation Accumulation
	// ClipValue, if positive, is the bound TrainStep clamps every gradient
	// element to before the step (see ClipGradValue).
	ClipValue float64
	// ClipNorm, if positive, is the global L2 norm TrainStep scales the
	// gradients down to before the step (see ClipGradNorm); set it or
	// ClipValue, not both.
	ClipNorm float64
	// OnNonFinite is what TrainStep does with a non-finite loss that no
	// loss scaler absorbs (StopOnNonFinite unless set).
	OnNonFinite OnNonFinite
	// Seed is the one seed of the run (Lightning's seed_everything): it
	// decides the initial weights of a model built from InitModule; give
	// it to the Dataset too, to decide the order of the data.
	Seed uint64

	// Loggers receive LogDict's records: give them to rank 0's fabric
	// only.
	Loggers []Logger
	// OnStepEnd, OnValidationEnd and OnCheckpoint, if set, hear of every
	// TrainStep (step counts from 0: the StepCount before it), every
	// validation pass (EvalLoss; step is the step it follows, -1 before
	// the first) and every checkpoint Save wrote (SaveOptions.Step, and
	// its path). An error they return is the call's.
	OnStepEnd       func(step int, res StepResult) error
	OnValidationEnd func(step int, loss float64) error
	OnCheckpoint    func(step int, path string) error
}

// New returns a Fabric with the settings of cfg, or the first of them that
// cannot run. Its tape recycles activations during Backward, so the
// forward pass's results (the logits) are read while the step runs, not
// kept past it.
func New(cfg Config) (*Fabric, error) {
	pol := cfg.Policy
	plain := len(pol.Rules) == 0 && pol.Default.String() == "32-true" // the zero Policy's
	switch {
	case !isNil(cfg.Precision) && !plain:
		return nil, errors.New("fabric: both Precision and Policy are set; give the whole model's plugin as Policy.Default")
	case plain && isNil(cfg.Precision): // Lightning's default
		cfg.Precision = precision.True{DType: dtype.F32}
		fallthrough
	case plain:
		pol = precision.Policy{Default: precision.Once(cfg.Precision)}
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg.hearNothingUnset()
	f := &Fabric{cfg: cfg, plugin: cfg.Precision, policy: pol, scaler: precision.ScalerOf(nil)}
	f.tape.Recycle = true
	if err := f.place(); err != nil {
		return nil, err
	}
	return f, nil
}

// check reports the first setting of c that cannot run, but for those of
// its ranks (place's).
func (c Config) check() error {
	switch {
	case c.LossScaling != precision.LossScalingAuto && c.LossScaling != precision.NoLossScaling:
		return fmt.Errorf("fabric: loss scaling %d: accepted are LossScalingAuto and NoLossScaling", c.LossScaling)
	case c.Accumulation.MicroBatches < 0:
		return fmt.Errorf("fabric: %d micro-batches: want at least 1, or 0 for the whole batch", c.Accumulation.MicroBatches)
	case c.Accumulation.Sync < SyncAuto || c.Accumulation.Sync > SyncLast:
		return fmt.Errorf("fabric: gradient sync %d: accepted are SyncAuto, SyncEvery and SyncLast", c.Accumulation.Sync)
	case c.ClipValue < 0 || math.IsNaN(c.ClipValue) || math.IsInf(c.ClipValue, 0):
		return fmt.Errorf("fabric: clip value %g: want a positive bound, or 0 for none", c.ClipValue)
	case c.ClipNorm < 0 || math.IsNaN(c.ClipNorm) || math.IsInf(c.ClipNorm, 0):
		return fmt.Errorf("fabric: clip norm %g: want a positive bound, or 0 for none", c.ClipNorm)
	case c.ClipNorm > 0 && c.ClipValue > 0:
		return fmt.Errorf("fabric: clip norm %g and clip value %g: clip by one of them", c.ClipNorm, c.ClipValue)
	case c.OnNonFinite < StopOnNonFinite || c.OnNonFinite > TrainOnNonFinite:
		return fmt.Errorf("fabric: on-non-finite %d: accepted are StopOnNonFinite, SkipNonFinite and TrainOnNonFinite", c.OnNonFinite)
	}
	for i, l := range c.Loggers {
		if isNil(l) {
			return fmt.Errorf("fabric: logger %d is nil", i)
		}
	}
	return nil
}

// hearNothingUnset makes each unset hook one that hears nothing, so that
// the loop calls every hook alike.
func (c *Config) hearNothingUnset() {
	if c.OnStepEnd == nil {
		c.OnStepEnd = func(int, StepResult) error { return nil }
	}
	if c.OnValidationEnd == nil {
		c.OnValidationEnd = func(int, float64) error { return nil }
	}
	if c.OnCheckpoint == nil {
		c.OnCheckpoint = func(int, string) error { return nil }
	}
}

// place makes f one rank of its strategy over its communicator (the mesh's
// column on a mesh), when the strategy has work there: over more than one
// rank, or sharding the optimizer state on one.
func (f *Fabric) place() error {
	c := f.cfg
	info, err := strategy.Lookup(c.Strategy)
	if err != nil {
		return fmt.Errorf("fabric: %w", err)
	}
	data := c.Comm
	switch {
	case c.Mesh != nil && isNil(c.Comm):
		return errors.New("fabric: a Mesh needs Comm, the communicator of every rank of it")
	case c.Mesh != nil && (isNil(c.Mesh.Data) || isNil(c.Mesh.Tensor) || c.Mesh.DP*c.Mesh.TP != c.Comm.Size()):
		return fmt.Errorf("fabric: the mesh is not one of Comm's %d ranks (comm.NewMesh makes one)", c.Comm.Size())
	case c.Mesh != nil && len(c.TensorPlan) == 0:
		return errors.New("fabric: a Mesh needs a TensorPlan, which splits the model across its rows")
	case c.Mesh == nil && len(c.TensorPlan) > 0:
		return errors.New("fabric: a TensorPlan needs a Mesh, whose rows split the model")
	case c.Mesh != nil:
		data = c.Mesh.Data
		f.mesh = meshAgreement{c.Comm}
	}
	if isNil(data) {
		return nil
	}
	if err := info.CheckRanks(data.Size()); err != nil {
		return fmt.Errorf("fabric: %w", err)
	}
	if h := c.Sharding.Hybrid; info.Hybrid && (h == nil || h.Shard.Size()*h.Replica.Size() != data.Size()) {
		return fmt.Errorf("fabric: strategy %s needs Sharding.Hybrid, the shard and replica groups of its %d ranks (comm.NewHybrid makes them)", info.Name, data.Size())
	}
	if data.Size() > 1 || info.Sharding.OptimizerState {
		f.distCfg = &distConfig{info: info, comm: data}
	}
	return nil
}
