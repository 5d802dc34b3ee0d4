package models

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/weftml/weft/data"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/parallel"
)

// Spec is what weft knows of a model: how to build it, what it trains on
// and how tensor parallelism splits it. A model registers its Spec in its
// file's init; weft train, plan, parity and bench find it by Name.
type Spec struct {
	Name string // "gpt": what --model names
	// New builds the model at its reference size (weft parity, weft bench).
	New func(init *nn.Init) Model
	// LM builds a language model at a run's size, its Vocab the
	// tokenizer's: such a model trains on text (the Go corpus or --data),
	// samples and exports. CheckSize refuses a size LM cannot build
	// (nil: any); its error needs no model name.
	LM        func(init *nn.Init, size GPTConfig) Model
	CheckSize func(size GPTConfig) error
	// Data is the bundled dataset of a model that is not a language
	// model: batch i of n examples drawn from seed. Unit names an example
	// ("images").
	Data func(seed uint64, n int, i uint64) data.Batch
	Unit string
	// Bench is the input's shape in a batch of weft bench step: token ids
	// [B, T] for a language model, else X [N, ...]; Classes is the
	// targets' range. nil: no step benchmark.
	Bench   []int
	Classes int
	// Plan is the model's tensor-parallel layout and SequencePlan the one
	// with sequence parallelism (nil: the model has none).
	Plan, SequencePlan parallel.Plan
}

var (
	registryMu sync.RWMutex
	registry   = map[string]Spec{}
)

// Register makes the model s describes available by s.Name. Models
// register in init, so a spec without a name, a constructor or data to
// train on, or a name registered twice, is a programming error, and
// Register panics like sql.Register rather than let one model replace
// another.
func Register(s Spec) {
	registryMu.Lock()
	defer registryMu.Unlock()
	switch _, dup := registry[s.Name]; {
	case s.Name == "" || s.New == nil:
		panic(fmt.Sprintf("models: Register of %q without a name or New", s.Name))
	case dup:
		panic("models: Register called twice for model " + s.Name)
	case s.LM != nil && s.Data != nil:
		panic("models: model " + s.Name + " is a language model with bundled data: give LM or Data")
	}
	registry[s.Name] = s
}

// Lookup is the spec of the model called name; an unknown name is an error
// that lists the registered ones.
func Lookup(name string) (Spec, error) {
	registryMu.RLock()
	s, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return Spec{}, fmt.Errorf("unknown model %q (accepted: %s)", name, strings.Join(Names(), ", "))
	}
	return s, nil
}

// Names lists the registered models, sorted.
func Names() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return slices.Sorted(maps.Keys(registry))
}

// NamesWhere lists the registered models whose spec has, sorted.
func NamesWhere(has func(Spec) bool) []string {
	var names []string
	for _, n := range Names() {
		if s, _ := Lookup(n); has(s) {
			names = append(names, n)
		}
	}
	return names
}

// New builds the reference model called name, initialised from seed.
func New(name string, seed uint64) (Model, error) { return build(name, nn.NewInit(seed)) }

// NewMeta builds the reference model called name on shapes alone (see
// nn.Meta): a plan converts and measures it without memory for weights,
// and nn.InitRange fills in any part of a parameter as New(name, seed)
// initialises it.
func NewMeta(name string, seed uint64) (Model, error) { return build(name, nn.Meta(seed)) }

func build(name string, init *nn.Init) (Model, error) {
	s, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	return s.New(init), nil
}

// TensorPlan is the tensor-parallel layout of the model called name, with
// sequence parallelism if sequence is set.
func TensorPlan(name string, sequence bool) (parallel.Plan, error) {
	planOf, what := func(s Spec) parallel.Plan { return s.Plan }, "tensor-parallel"
	if sequence {
		planOf, what = func(s Spec) parallel.Plan { return s.SequencePlan }, "sequence-parallel"
	}
	s, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if p := planOf(s); p != nil {
		return p, nil
	}
	with := NamesWhere(func(s Spec) bool { return planOf(s) != nil })
	return nil, fmt.Errorf("model %q has no %s plan (models with one: %s)", name, what, strings.Join(with, ", "))
}
