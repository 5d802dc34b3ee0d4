package train

import (
	"context"
	"errors"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/parallel"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/quant"
	"github.com/weftml/weft/strategy"
	"github.com/weftml/weft/tensor"
)

// setup is what a run resolves from its Config before it allocates
// anything: Run trains it, Plan describes it, so that weft plan ARGS is
// weft train ARGS's plan.
type setup struct {
	c Config
	// pol is the run's precision with the LoRA adapters joined to its
	// default; scaling is its loss scaling.
	pol     precision.Policy
	scaling precision.LossScaling
	info    strategy.Info
	t       *task
	// warnings are said once before training: the precision's notices
	// and the files the data left out.
	warnings []string
}

// resolve checks c and resolves its precision, strategy and task.
func resolve(c Config) (*setup, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	if err := c.resolveData(); err != nil {
		return nil, err
	}
	s := &setup{}
	var err error
	if s.pol, s.scaling, err = c.policy(func(msg string) { s.warnings = append(s.warnings, msg) }); err != nil {
		return nil, err
	}
	if s.pol, err = c.withLoRA(s.pol); err != nil {
		return nil, err
	}
	if s.info, err = strategy.Lookup(c.Strategy); err != nil {
		return nil, err
	}
	if err := s.info.CheckRanks(c.dataRanks()); err != nil {
		return nil, err
	}
	if s.t, err = newTask(c); err != nil {
		return nil, err
	}
	s.warnings = append(s.warnings, s.t.notes...)
	c.HF = s.t.arch // recorded in the manifest, so that export and sample build the model without its folder
	s.c = c
	return s, nil
}

// withLoRA joins c's LoRA adapters, if it trains any, to pol's default.
func (c Config) withLoRA(pol precision.Policy) (precision.Policy, error) {
	if len(c.LoRA.Targets) == 0 {
		return pol, nil
	}
	lora := precision.SpecFunc("lora", func() precision.Plugin { return quant.NewLoRA(c.LoRA.Rank, c.LoRA.Alpha, c.LoRA.Targets...) })
	root, err := precision.Join(pol.Default, lora)
	if err != nil {
		return precision.Policy{}, err
	}
	pol.Default = root
	return pol, nil
}

// Plan is the plan of the run c describes, built as Run builds the plan
// it prints and admits: c's model on shapes alone (no memory for its
// weights or batch), converted for its precision and LoRA adapters,
// split as rank 0 of its mesh holds it, with the bytes per rank of its
// strategy and the allocator's predicted peak over a step. Warnings Run
// would say before training go to warn.
func Plan(ctx context.Context, c Config, warn func(string)) (*fabric.Plan, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := resolve(c)
	if err != nil {
		return nil, err
	}
	for _, w := range s.warnings {
		warn(w)
	}
	return s.plan()
}

// plan builds the run's plan on its meta model.
func (s *setup) plan() (*fabric.Plan, error) { return s.planOf(s.c) }

// planOf builds the plan of c, the run's config or a variant of its batch
// size, strategy, devices or activation checkpointing, on a fresh meta
// model of the run's task.
func (s *setup) planOf(c Config) (*fabric.Plan, error) {
	meta := s.t.metaModel()
	layout, err := splitMeta(c, meta)
	if err != nil {
		return nil, err
	}
	p, err := fabric.MakePlan(meta, s.pol, s.scaling, c.Strategy, c.dataRanks())
	if err != nil {
		return nil, err
	}
	p.ShardWithin(c.plannedShardSize())
	if layout != nil {
		p.SplitBy(layout)
	}
	p.ActivationCheckpointing = c.ActivationCheckpointing
	p.MicroBatches = c.GradAccum
	p.PredictTraffic(c.ranksPerHost(), !c.ReshardAfterForward)
	if err := p.PredictPeak(shapesOf(s.t.shapes, c.BatchSize)); err != nil {
		return nil, err
	}
	return p, nil
}

// splitMeta splits the meta model m as rank 0 of a mesh row holds it
// (nil without tensor parallelism). Splitting reads only the group's rank
// and size, so an in-process group stands for the run's row, and nothing
// is sent.
func splitMeta(c Config, m models.Model) (*parallel.Layout, error) {
	if c.TP <= 1 {
		return nil, nil
	}
	plan, err := models.TensorPlan(c.Model, c.SequenceParallel)
	if err != nil {
		return nil, err
	}
	group, err := comm.Open("local", c.TP, c.CommTimeout)
	if err != nil {
		return nil, err
	}
	l, err := parallel.Parallelize(m, group[0], plan)
	for _, g := range group {
		err = errors.Join(err, g.Close())
	}
	return l, err
}

// shapesOf is a batch of rows shaped like b, holding shapes alone: a meta
// input and no token ids or targets, so that a plan predicts the peak of
// any batch size without memory for it.
func shapesOf(b data.Batch, rows int) data.Batch {
	out := data.Batch{}
	if b.X != nil {
		out.X = tensor.Meta(b.X.DType(), append([]int{rows}, b.X.Shape()[1:]...)...)
	}
	if b.Shape != nil {
		out.Shape = []int{rows, b.Shape[1]}
	}
	return out
}

// sampleShapes is shapesOf a batch of one row, which it frees.
func sampleShapes(one data.Batch, rows int) data.Batch {
	defer tensor.Free(one.X)
	return shapesOf(one, rows)
}
