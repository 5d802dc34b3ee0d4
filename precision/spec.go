package precision

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/suggest"
	"github.com/weftml/weft/optim/lowbit"
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
var specs = []spec{
	{"64-true", func(Options) Plugin { return &True{DType: dtype.F64} }},
	{"32-true", func(Options) Plugin { return &True{DType: dtype.F32} }},
	{"16-mixed", func(o Options) Plugin {
		return MixedScaled{Mixed: &Mixed{DType: dtype.F16}, GradScaler: o.gradScaler()}
	}},
	{"bf16-mixed", func(Options) Plugin { return &Mixed{DType: dtype.BF16} }},
	{"16-true", func(Options) Plugin { return &True{DType: dtype.F16} }},
	{"bf16-true", func(Options) Plugin { return &True{DType: dtype.BF16} }},
	{"fp8", func(Options) Plugin { return fp8.NewDelayed() }},
	{"fp8-current", func(Options) Plugin { return fp8.NewCurrent() }},
	{"fp8-mx", func(Options) Plugin { return fp8.NewMX() }},
	// Transformer Engine's Float8BlockScaling: 1×128 blocks, 128×128 weight tiles.
	{"fp8-block", func(Options) Plugin { return fp8.NewBlock() }},
	// torchao's rowwise recipes.
	{"fp8-rowwise", func(Options) Plugin { return fp8.NewRowwise(false) }},
	{"fp8-rowwise-gw-hp", func(Options) Plugin { return fp8.NewRowwise(true) }},
	// torchao's MX training recipe in FP4 (E2M1 elements, E8M0 scales).
	{"mxfp4", func(Options) Plugin { return fp8.NewMXFP4() }},
	// Transformer Engine's NVFP4BlockScaling, the output gradient rounded stochastically.
	{"nvfp4", func(Options) Plugin { return fp8.NewNVFP4() }},
	// Lightning's TransformerEnginePrecision: weights, inputs and every op
	// in its dtype (or the fallback argument's), Linear GEMMs in FP8 with
	// delayed scaling. The members claim disjoint roles, so the
	// composition needs no check.
	{"transformer-engine", func(Options) Plugin { return newTransformerEngine(dtype.BF16) }},
	{"transformer-engine-float16", func(Options) Plugin { return newTransformerEngine(dtype.F16) }},
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
	// Low-bit AdamW state, to join to a spec with +: bitsandbytes' 8-bit
	// blockwise, torchao's 4-bit and FP8.
	{"adamw8bit", func(Options) Plugin { return LowBitState{lowbit.AdamW8bit} }},
	{"adamw4bit", func(Options) Plugin { return LowBitState{lowbit.AdamW4bit} }},
	{"adamwfp8", func(Options) Plugin { return LowBitState{lowbit.AdamWFp8} }},
}

// spec is a built-in spec name and its builder.
type spec struct {
	name  string
	build func(Options) Plugin
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

// Specs lists every accepted spec string: canonical names, aliases, then
// the names given to Register, sorted.
func Specs() []string {
	out := make([]string, 0, len(specs)+len(aliases))
	for _, s := range specs {
		out = append(out, s.name)
	}
	out = append(out, "64", "32", "16", "bf16")
	registry.RLock()
	defer registry.RUnlock()
	return append(out, slices.Sorted(maps.Keys(registry.factories))...)
}

// registry holds the plugins of one's own that Register names.
var registry struct {
	sync.RWMutex
	factories map[string]func() Plugin
}

// validName is a spec name: it may not hold the spec grammar's
// separators ("+" between plugins, "=" and "," of a policy, the
// parentheses of arguments).
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// Register makes factory's plugin a spec name, accepted wherever a spec
// string is (--precision, --precision-for, a config's precision:, weft
// plan) and composable with "+". factory is called once for every model
// (and rank) resolved with the name and must return a fresh value. A name
// that is not a valid spec name, or is taken (built in, an alias, or
// registered), is an error. It is safe for concurrent use.
func Register(name string, factory func() Plugin) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("precision: cannot register %q: a spec name is letters, digits, '.', '_' and '-', starting with a letter or digit", name)
	}
	if factory == nil {
		return fmt.Errorf("precision: cannot register %q: the factory is nil", name)
	}
	_, alias := aliases[name]
	if alias || slices.ContainsFunc(specs, func(s spec) bool { return s.name == name }) {
		return fmt.Errorf("precision: cannot register %q: a built-in spec has that name", name)
	}
	registry.Lock()
	defer registry.Unlock()
	if _, ok := registry.factories[name]; ok {
		return fmt.Errorf("precision: cannot register %q: it is registered already", name)
	}
	if registry.factories == nil {
		registry.factories = map[string]func() Plugin{}
	}
	registry.factories[name] = factory
	return nil
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

// String is the spec's canonical spelling, which ParseSpec reads back to
// the same Spec: the plugins' names, with the arguments given ("fp8(margin=1)").
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
	if _, err := build(); err != nil {
		return Spec{}, err
	}
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.String()
	}
	return Spec{name: strings.Join(names, "+"), build: build}, nil
}

// ParseSpec reads a spec string: one of Specs, with arguments where its
// plugin takes any ("fp8(margin=1,history=16)", "nf4(block=128)"), a
// jmp-style policy ("params=float32,compute=bfloat16,output=float32"), or
// several joined with "+" and composed ("bf16-mixed+fp8"). Warnings (deprecated aliases)
// go to opts.Warn here, once, not on every New.
func ParseSpec(spec string, opts Options) (Spec, error) {
	if strings.TrimSpace(spec) == "" {
		return Spec{}, fmt.Errorf("precision: the spec is empty; accepted: %s", accepted())
	}
	parts := strings.Split(spec, "+")
	specs := make([]Spec, len(parts))
	for i, part := range parts {
		if strings.TrimSpace(part) == "" {
			return Spec{}, fmt.Errorf("precision %q: part %d of %d is empty; join plugins with one + between two names, as in bf16-mixed+fp8", spec, i+1, len(parts))
		}
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

func parseOne(text string, opts Options) (Spec, error) {
	text = strings.TrimSpace(text)
	name, args, hasArgs := strings.Cut(text, "(")
	if !hasArgs && strings.Contains(name, "=") {
		p, err := ParseJMP(name)
		if err != nil {
			return Spec{}, err
		}
		return Spec{name: p.Name(), build: func() (Plugin, error) { return p, nil }}, nil
	}
	if hasArgs {
		var closed bool
		if args, closed = strings.CutSuffix(args, ")"); !closed {
			return Spec{}, fmt.Errorf("precision %q: want NAME(ARG=VALUE,...) with a closing parenthesis", text)
		}
	}
	canonical, base := lookup(strings.TrimSpace(name), opts)
	if base == nil {
		if near, ok := suggest.Closest(strings.TrimSpace(name), Specs()); ok {
			return Spec{}, fmt.Errorf("precision %q is not known; did you mean %s? accepted: %s", text, near, accepted())
		}
		return Spec{}, fmt.Errorf("precision %q is not known; accepted: %s", text, accepted())
	}
	if !hasArgs {
		return Spec{name: canonical, build: func() (Plugin, error) { return base(), nil }}, nil
	}
	set, canonArgs, err := parseArgs(base(), args)
	if err != nil {
		return Spec{}, fmt.Errorf("precision %q: %w", text, err)
	}
	build := func() (Plugin, error) {
		p := base()
		set(p)
		return p, nil
	}
	if p, _ := build(); len(Members(p)) > 1 { // an argument may claim a role another member holds
		if _, err := Compose(Members(p)...); err != nil {
			return Spec{}, fmt.Errorf("precision %q: %w", text, err)
		}
	}
	return Spec{name: strings.TrimSpace(name) + "(" + canonArgs + ")", build: build}, nil
}

// accepted lists what a spec may be, for errors.
func accepted() string {
	return strings.Join(Specs(), ", ") + ", a policy like params=float32,compute=bfloat16,output=float32, or several joined by +"
}

// lookup returns the builder of a spec name, built in, an alias (whose
// notice goes to opts.Warn) or registered, and the canonical name of what
// it builds; build is nil for a name that is not known.
func lookup(name string, opts Options) (canonical string, build func() Plugin) {
	if a, ok := aliases[name]; ok {
		if a.notice != "" && opts.Warn != nil {
			opts.Warn(a.notice)
		}
		name = a.target
	}
	for _, s := range specs {
		if s.name == name {
			build := func() Plugin { return s.build(opts) }
			return build().Name(), build
		}
	}
	registry.RLock()
	defer registry.RUnlock()
	if f, ok := registry.factories[name]; ok {
		return name, f
	}
	return "", nil
}
