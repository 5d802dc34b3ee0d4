package precision

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/precision/fp8"
	"github.com/weftml/weft/precision/quant"
)

// Options configure the plugins a spec string builds.
type Options struct {
	// GradScaler settings of "16-mixed"; zero values take PyTorch's
	// defaults (65536, 2, 0.5, 2000).
	InitScale      float64
	GrowthFactor   float64
	BackoffFactor  float64
	GrowthInterval int
	// Warn receives deprecation notices (the aliases "16" and "bf16"); nil drops them.
	Warn func(msg string)
}

// specs builds each canonical spec string's plugin, in Lightning's order.
var specs = []struct {
	name  string
	build func(Options) Plugin
}{
	{"64-true", func(Options) Plugin { return True{DType: dtype.F64} }},
	{"32-true", func(Options) Plugin { return True{DType: dtype.F32} }},
	{"16-mixed", func(o Options) Plugin {
		return MixedScaled{Mixed: &Mixed{DType: dtype.F16}, GradScaler: o.gradScaler()}
	}},
	{"bf16-mixed", func(Options) Plugin { return &Mixed{DType: dtype.BF16} }},
	{"16-true", func(Options) Plugin { return True{DType: dtype.F16} }},
	{"bf16-true", func(Options) Plugin { return True{DType: dtype.BF16} }},
	{"fp8", func(Options) Plugin { return fp8.NewDelayed() }},
	{"fp8-current", func(Options) Plugin { return fp8.NewCurrent() }},
	{"fp8-mx", func(Options) Plugin { return fp8.NewMX() }},
	// Lightning's TransformerEnginePrecision: weights, inputs and every op
	// in its dtype, Linear GEMMs in FP8 with delayed scaling. The members
	// claim disjoint roles, so the composition needs no check.
	{"transformer-engine", func(Options) Plugin {
		return &composite{members: []Plugin{True{DType: dtype.BF16}, fp8.NewDelayed()}}
	}},
	{"transformer-engine-float16", func(Options) Plugin {
		return &composite{members: []Plugin{True{DType: dtype.F16}, fp8.NewDelayed()}}
	}},
	{"bf16-fp8", func(Options) Plugin { // bf16-mixed+fp8
		return &composite{members: []Plugin{&Mixed{DType: dtype.BF16}, fp8.NewDelayed()}}
	}},
	// bitsandbytes' modes, as Lightning's BitsandbytesPrecision names them.
	{"nf4", func(Options) Plugin { return quant.NewFourBit(quant.NF4, false) }},
	{"nf4-dq", func(Options) Plugin { return quant.NewFourBit(quant.NF4, true) }},
	{"fp4", func(Options) Plugin { return quant.NewFourBit(quant.FP4, false) }},
	{"fp4-dq", func(Options) Plugin { return quant.NewFourBit(quant.FP4, true) }},
	{"int8", func(Options) Plugin { return quant.NewInt8(false) }},
	{"int8-training", func(Options) Plugin { return quant.NewInt8(true) }},
}

// aliases are Lightning's historical spellings; those with a notice warn.
var aliases = map[string]struct{ target, notice string }{
	"64":   {"64-true", ""},
	"32":   {"32-true", ""},
	"16":   {"16-mixed", "precision 16 is supported for historical reasons but its usage is discouraged; use 16-mixed"},
	"bf16": {"bf16-mixed", "precision bf16 is supported for historical reasons but its usage is discouraged; use bf16-mixed"},
}

func (o Options) gradScaler() *GradScaler {
	s := NewGradScaler()
	if o.InitScale != 0 {
		s.SetScale(o.InitScale)
	}
	if o.GrowthFactor != 0 {
		s.GrowthFactor = o.GrowthFactor
	}
	if o.BackoffFactor != 0 {
		s.BackoffFactor = o.BackoffFactor
	}
	if o.GrowthInterval != 0 {
		s.GrowthInterval = o.GrowthInterval
	}
	return s
}

// Specs lists every accepted spec string: canonical names, then aliases.
func Specs() []string {
	out := make([]string, 0, len(specs)+len(aliases))
	for _, s := range specs {
		out = append(out, s.name)
	}
	return append(out, "64", "32", "16", "bf16")
}

// Spec is a parsed precision spec: a recipe for plugins, not a plugin.
// Plugins hold state that belongs to one model on one rank (a loss scale,
// amax histories, the layers they converted), so a Policy keeps Specs and
// every Resolve builds fresh plugins from them. The zero Spec builds
// "32-true".
type Spec struct {
	name  string
	build func() (Plugin, error)
}

// New builds a fresh plugin of the spec.
func (s Spec) New() (Plugin, error) {
	if s.build == nil {
		return True{DType: dtype.F32}, nil
	}
	return s.build()
}

// String is the canonical name of the plugins the spec builds.
func (s Spec) String() string {
	if s.build == nil {
		return "32-true"
	}
	return s.name
}

// SpecFunc is the Spec, called name, of a plugin of one's own: build is
// called once for every model (and rank) resolved with it and must return
// a fresh value.
func SpecFunc(name string, build func() Plugin) Spec {
	return Spec{name: name, build: func() (Plugin, error) { return build(), nil }}
}

// Once is the Spec of one plugin value: the value belongs to the first
// model resolved with it, and resolving a second model with it is an
// error (its state, a loss scale or amax histories, cannot serve two).
func Once(p Plugin) Spec {
	var bound atomic.Bool
	return Spec{name: p.Name(), build: func() (Plugin, error) {
		if bound.Swap(true) {
			return nil, fmt.Errorf("precision: the plugin value %s already belongs to a model; give each model (and rank) its own, e.g. with precision.SpecFunc", p.Name())
		}
		return p, nil
	}}
}

// Join is the Spec of the composition of the plugins specs build, checked
// once here: a conflict is the *ConflictError Compose returns.
func Join(specs ...Spec) (Spec, error) {
	build := func() (Plugin, error) {
		ps := make([]Plugin, len(specs))
		for i, s := range specs {
			p, err := s.New()
			if err != nil {
				return nil, err
			}
			ps[i] = p
		}
		return Compose(ps...)
	}
	p, err := build()
	if err != nil {
		return Spec{}, err
	}
	return Spec{name: p.Name(), build: build}, nil
}

// ParseSpec reads a spec string: one of Specs, a jmp-style policy
// ("params=float32,compute=bfloat16,output=float32"), or several joined
// with "+" and composed ("bf16-mixed+fp8"). Warnings (deprecated aliases)
// go to opts.Warn here, once, not on every New.
func ParseSpec(spec string, opts Options) (Spec, error) {
	parts := strings.Split(spec, "+")
	specs := make([]Spec, len(parts))
	for i, part := range parts {
		s, err := parseOne(part, opts)
		if err != nil {
			return Spec{}, err
		}
		specs[i] = s
	}
	if len(specs) == 1 {
		return specs[0], nil
	}
	return Join(specs...)
}

// Parse builds one plugin of a spec string (see ParseSpec).
func Parse(spec string, opts Options) (Plugin, error) {
	s, err := ParseSpec(spec, opts)
	if err != nil {
		return nil, err
	}
	return s.New()
}

func parseOne(spec string, opts Options) (Spec, error) {
	name := strings.TrimSpace(spec)
	if strings.Contains(name, "=") {
		p, err := ParseJMP(name)
		if err != nil {
			return Spec{}, err
		}
		return Spec{name: p.Name(), build: func() (Plugin, error) { return p, nil }}, nil
	}
	if a, ok := aliases[name]; ok {
		if a.notice != "" && opts.Warn != nil {
			opts.Warn(a.notice)
		}
		name = a.target
	}
	for _, s := range specs {
		if s.name == name {
			build := s.build
			return Spec{name: build(opts).Name(), build: func() (Plugin, error) { return build(opts), nil }}, nil
		}
	}
	return Spec{}, fmt.Errorf("precision %q is not known; accepted: %s, a policy like params=float32,compute=bfloat16,output=float32, or several joined by +", spec, strings.Join(Specs(), ", "))
}
