package precision

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
)

// Rule gives the modules matching Pattern their own plugin. Patterns are
// dotted module paths where "*" matches one segment and "**" any number
// ("vision.**", "blocks.*.fc"), or "kind:" and a module kind ("kind:Conv2d").
type Rule struct {
	Pattern string
	Spec    Spec
}

// ParseRule reads "PATTERN=SPEC" as given to --precision-for.
func ParseRule(s string, opts Options) (Rule, error) {
	pattern, spec, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(pattern) == "" {
		return Rule{}, fmt.Errorf("precision rule %q: want PATTERN=SPEC, e.g. 'vision.**=16-mixed'", s)
	}
	sp, err := ParseSpec(spec, opts)
	if err != nil {
		return Rule{}, fmt.Errorf("precision rule %q: %w", s, err)
	}
	return Rule{Pattern: strings.TrimSpace(pattern), Spec: sp}, nil
}

// ParsePolicy is the one place a run's precision is read: the spec of the
// whole model, per-module rules "PATTERN=SPEC", and the loss scaling
// ("auto", "dynamic" or "" for auto; "none"). Deprecation notices go to
// opts.Warn.
func ParsePolicy(spec string, rules []string, lossScale string, opts Options) (Policy, LossScaling, error) {
	var scaling LossScaling
	switch lossScale {
	case "", "auto", "dynamic":
	case "none":
		scaling = NoLossScaling
	default:
		return Policy{}, 0, fmt.Errorf("loss scale %q: accepted are auto and none", lossScale)
	}
	root, err := ParseSpec(spec, opts)
	if err != nil {
		return Policy{}, 0, err
	}
	pol := Policy{Default: root}
	for _, r := range rules {
		rule, err := ParseRule(r, opts)
		if err != nil {
			return Policy{}, 0, err
		}
		pol.Rules = append(pol.Rules, rule)
	}
	return pol, scaling, nil
}

// specificity ranks how precisely a pattern names modules: a literal path
// segment counts 2, "*" 1, "**" 0, and a kind rule 1. Zero means no match.
func (r Rule) specificity(path, kind string) int {
	if k, ok := strings.CutPrefix(r.Pattern, "kind:"); ok {
		if k == kind {
			return 1
		}
		return 0
	}
	var segs []string
	if path != "" {
		segs = strings.Split(path, ".")
	}
	return matchSegments(strings.Split(r.Pattern, "."), segs)
}

// Select returns the modules of m that patterns name, in a Rule's syntax
// ("blocks.*", "kind:Block"). Containers such as nn.List, which have no
// forward of their own, are not selected. A pattern that names no module
// is an error naming it and the nearest module paths.
func Select(m nn.Module, patterns []string) (map[nn.Module]bool, error) {
	found := map[nn.Module]bool{}
	var modules []Scope
	nn.Walk(m, func(path string, mod nn.Module) {
		if reflect.TypeOf(mod).Comparable() {
			modules = append(modules, Scope{Path: path, Kind: nn.Kind(mod), Module: mod})
		}
	})
	for _, p := range patterns {
		matched := false
		for _, s := range modules {
			if (Rule{Pattern: p}).specificity(s.Path, s.Kind) > 0 {
				found[s.Module], matched = true, true
			}
		}
		if !matched {
			return nil, fmt.Errorf("%q: %w", p, noMatch(p, modules))
		}
	}
	return found, nil
}

// noMatch is the error of a pattern that names none of modules.
func noMatch(pattern string, modules []Scope) error {
	return fmt.Errorf("matches no module; nearest: %s", strings.Join(nearest(pattern, modules, 3), ", "))
}

// matchSegments returns 1 + the specificity of pattern over path if it
// matches, else 0.
func matchSegments(pattern, path []string) int {
	if len(pattern) == 0 {
		if len(path) == 0 {
			return 1
		}
		return 0
	}
	switch pattern[0] {
	case "**":
		for skip := 0; skip <= len(path); skip++ {
			if s := matchSegments(pattern[1:], path[skip:]); s > 0 {
				return s
			}
		}
		return 0
	case "*":
		if len(path) == 0 {
			return 0
		}
		if s := matchSegments(pattern[1:], path[1:]); s > 0 {
			return s + 1
		}
		return 0
	}
	if len(path) == 0 || path[0] != pattern[0] {
		return 0
	}
	if s := matchSegments(pattern[1:], path[1:]); s > 0 {
		return s + 2
	}
	return 0
}

// Policy assigns plugins to the modules of a model: the most specific
// matching rule wins, a module no rule matches inherits its parent's
// plugin, and the root's default is Default. It holds Specs, not plugins:
// each Resolve builds the plugins of one model.
type Policy struct {
	Default Spec
	Rules   []Rule
}

// Scope is one module's resolved precision.
type Scope struct {
	Path, Kind string
	Module     nn.Module
	Plugin     Plugin
	Rule       int // index of the rule that chose Plugin; -1 for the default
	// Converted names, after Convert, the members of Plugin that replaced
	// the module's arithmetic (a Linear's GEMM), in order: "nf4-dq", "lora".
	Converted []string
}

// Resolution is a policy applied to one model: every module's plugin and
// the one loss scaler that serves the whole model.
type Resolution struct {
	Root   Plugin
	Scopes []Scope // pre-order, root first
	Scaler Scaler
	// Warnings are what Convert left undone that a user should hear of
	// (a converter that declined some Linears, or all of the model's).
	Warnings []string
	rules    []Rule // the policy's, for Convert's messages
	scaled   bool
}

// LossScaling says whether NoLossScaling was asked for ("--loss-scale none").
type LossScaling int

const (
	LossScalingAuto LossScaling = iota
	NoLossScaling
)

// Resolve applies the policy to m, building fresh plugins for it: the
// default's and one per rule, which the modules the rule matches share.
// It fails on a rule that matches no module (naming the nearest module
// paths), on an ambiguous pair of rules, on two different loss scalers,
// and on float16 autocast without a loss scaler when scaling is
// NoLossScaling.
func (pol Policy) Resolve(m nn.Module, scaling LossScaling) (*Resolution, error) {
	root, err := pol.Default.New()
	if err != nil {
		return nil, err
	}
	plugins := make([]Plugin, len(pol.Rules))
	for i, r := range pol.Rules {
		if plugins[i], err = r.Spec.New(); err != nil {
			return nil, fmt.Errorf("precision rule %q: %w", r.Pattern, err)
		}
	}
	res := &Resolution{Root: root, rules: pol.Rules}
	matched := make([]bool, len(pol.Rules))
	if err := pol.resolve(res, plugins, matched, "", m, Scope{Plugin: root, Rule: -1}); err != nil {
		return nil, err
	}
	for i, ok := range matched {
		if !ok {
			return nil, fmt.Errorf("precision rule %q: %w", pol.Rules[i].Pattern, noMatch(pol.Rules[i].Pattern, res.Scopes))
		}
	}
	var owner Plugin
	ownerRule, ownerPath := 0, ""
	f16 := ""
	for _, s := range res.Scopes {
		if ScalesLoss(s.Plugin) {
			if owner != nil && ownerRule != s.Rule {
				return nil, &ConflictError{Role: "loss scaling", A: describe(owner, "module "+displayPath(ownerPath)), B: describe(s.Plugin, "module "+displayPath(s.Path))}
			}
			if owner == nil { // the outermost module of the owner's scope names it
				owner, ownerRule, ownerPath = s.Plugin, s.Rule, s.Path
			}
		}
		if a := Autocast(s.Plugin); a != nil && a.CastInput(autograd.OpLinear, dtype.F32) == dtype.F16 && f16 == "" {
			f16 = s.Path
		}
	}
	switch {
	case owner != nil && scaling == NoLossScaling:
		return nil, fmt.Errorf("precision: --loss-scale none, but %s scales the loss", owner.Name())
	case owner != nil:
		res.Scaler, res.scaled = ScalerOf(owner), true
	case f16 != "" && scaling == NoLossScaling:
		return nil, fmt.Errorf("precision: module %q computes in float16, whose gradients underflow without loss scaling; drop --loss-scale none", f16)
	case f16 != "":
		res.Scaler, res.scaled = NewGradScaler(), true // one dynamic scaler serves the whole model
	default:
		res.Scaler = noScaler{}
	}
	return res, nil
}

func (pol Policy) resolve(res *Resolution, plugins []Plugin, matched []bool, path string, m nn.Module, inherited Scope) error {
	kind := nn.Kind(m)
	plugin, best, bestRule := inherited.Plugin, 0, inherited.Rule
	for i, r := range pol.Rules {
		s := r.specificity(path, kind)
		matched[i] = matched[i] || s > 0
		switch {
		case s == 0 || s < best:
		case s == best && best > 0:
			return fmt.Errorf("precision: rules %q and %q both match module %q equally; make one more specific", pol.Rules[bestRule].Pattern, r.Pattern, path)
		default:
			plugin, best, bestRule = plugins[i], s, i
		}
	}
	scope := Scope{Path: path, Kind: kind, Module: m, Plugin: plugin, Rule: bestRule}
	res.Scopes = append(res.Scopes, scope)
	for _, c := range m.Children() {
		if err := pol.resolve(res, plugins, matched, nn.Join(path, c.Name), c.Module, scope); err != nil {
			return err
		}
	}
	return nil
}

// displayPath names the root module "(root)".
func displayPath(path string) string {
	if path == "" {
		return "(root)"
	}
	return path
}

// AgreeOver gives every plugin of the model that must agree with other
// ranks (the loss scaler, FP8 amaxes) the rank's reductions. Giving them
// twice (to a plugin several modules share) changes nothing.
func (r *Resolution) AgreeOver(ranks comm.Agreement) {
	for _, s := range r.Scopes {
		AgreeOver(s.Plugin, ranks)
	}
	if a, ok := r.Scaler.(RankAgreer); ok {
		a.AgreeOver(ranks)
	}
}

// UseSeed gives every plugin of the model that draws random bits the
// run's seed and the rank's index among all ranks.
func (r *Resolution) UseSeed(seed uint64, rank int) {
	for _, s := range r.Scopes {
		UseSeed(s.Plugin, seed, rank)
	}
}

// ScalesLoss reports whether the resolved model has a loss scaler.
func (r *Resolution) ScalesLoss() bool { return r.scaled }

// Scoper returns the autograd.Scoper that gives each module its plugin's
// scope during a forward pass started in the root's scope.
func (r *Resolution) Scoper() *Scopes {
	s := &Scopes{byModule: map[any]Scope{}, stack: []Scope{{Plugin: r.Root, Rule: -1}}}
	for _, sc := range r.Scopes {
		if reflect.TypeOf(sc.Module).Comparable() { // containers such as nn.List have no scope of their own
			s.byModule[sc.Module] = sc
		}
	}
	return s
}

// Scopes tracks the nesting of module scopes in a forward pass.
type Scopes struct {
	byModule map[any]Scope
	stack    []Scope
}

// Reset returns to the root scope (after a forward pass that panicked).
func (s *Scopes) Reset() { s.stack = s.stack[:1] }

// Resume implements autograd.ScopeResumer: the scopes open now, for the
// recompute of a checkpointed module.
func (s *Scopes) Resume() autograd.Scoper {
	return &Scopes{byModule: s.byModule, stack: slices.Clone(s.stack)}
}

// EnterScope implements autograd.Scoper: entering a module whose plugin
// differs from the enclosing scope's casts its input to the plugin's input
// dtype and switches autocast; leaving casts the output to the enclosing
// plugin's input dtype and switches back.
func (s *Scopes) EnterScope(tp *autograd.Tape, module any, x *autograd.Var) (*autograd.Var, func(*autograd.Var) *autograd.Var) {
	outer := s.stack[len(s.stack)-1]
	inner, ok := s.byModule[module]
	if !ok || inner.Rule == outer.Rule {
		return x, func(out *autograd.Var) *autograd.Var { return out }
	}
	s.stack = append(s.stack, inner)
	prev := tp.Caster
	tp.Caster = Autocast(inner.Plugin)
	x = castFloat(tp, x, inner.Plugin)
	return x, func(out *autograd.Var) *autograd.Var {
		s.stack = s.stack[:len(s.stack)-1]
		tp.Caster = prev
		return castFloat(tp, out, outer.Plugin)
	}
}

// castFloat casts a floating x to p's input dtype, if p has one.
func castFloat(tp *autograd.Tape, x *autograd.Var, p Plugin) *autograd.Var {
	if dt, ok := InputDType(p); ok && x != nil && x.Value.DType().IsFloat() {
		return tp.Cast(x, dt)
	}
	return x
}
