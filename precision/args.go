package precision

import (
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/precision/fp8"
	"github.com/weftml/weft/precision/quant"
)

// arg is one argument a spec takes, as in fp8(margin=1): it sets a field
// of the plugin member its table belongs to (see argsOf).
type arg struct {
	name, want string // "margin", "an integer from 0 to 64"
	// parse reads v into a setter of the field and v's canonical
	// spelling; ok is false when v is not accepted.
	parse func(v string) (set func(Plugin), canon string, ok bool)
	// refuse, if set, says why the plugin member cannot take the
	// argument ("" when it can).
	refuse func(p Plugin) string
}

// argsOf returns the arguments a plugin member takes, nil for none.
func argsOf(p Plugin) []arg {
	switch p.(type) {
	case *fp8.Delayed:
		return delayedArgs
	case *fp8.Current:
		return currentArgs
	case *fp8.MX:
		return mxArgs
	case *fp8.Block:
		return blockArgs
	case *fp8.NVFP4:
		return nvfp4Args
	case *quant.FourBit:
		return fourBitArgs
	case *quant.Int8:
		return int8Args
	case *transformerEngine:
		return transformerEngineArgs
	case *True:
		return trueArgs
	case *Mixed:
		return mixedArgs
	case MixedScaled:
		return mixedScaledArgs
	}
	return nil
}

var (
	delayedArgs = []arg{
		intArg("margin", 0, 64, func(p Plugin) *int { return &p.(*fp8.Delayed).Margin }),
		intArg("history", 1, 1<<16, func(p Plugin) *int { return &p.(*fp8.Delayed).HistoryLen }),
		choiceArg("algo", []string{"max", "most_recent"}, []fp8.AmaxAlgo{fp8.AmaxMax, fp8.AmaxMostRecent},
			func(p Plugin) *fp8.AmaxAlgo { return &p.(*fp8.Delayed).Algo }),
		formatArg(func(p Plugin) *fp8.Format { return &p.(*fp8.Delayed).Format }),
	}
	currentArgs = []arg{formatArg(func(p Plugin) *fp8.Format { return &p.(*fp8.Current).Format })}
	mxArgs      = []arg{formatArg(func(p Plugin) *fp8.Format { return &p.(*fp8.MX).Format })}
	// Float8BlockScaling's fp8_format and NVTE_FP8_BLOCK_SCALING_FP32_SCALES.
	blockArgs = []arg{
		formatArg(func(p Plugin) *fp8.Format { return &p.(*fp8.Block).Format }),
		choiceArg("fp32_scales", []string{"false", "true"}, []bool{false, true}, func(p Plugin) *bool { return &p.(*fp8.Block).Float32Scales }),
	}
	// NVFP4BlockScaling's stochastic rounding of gradients (false:
	// NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING=1).
	nvfp4Args = []arg{choiceArg("stochastic_rounding", []string{"false", "true"}, []bool{false, true}, func(p Plugin) *bool { return &p.(*fp8.NVFP4).StochasticRounding })}
	// bitsandbytes' blocksizes for 4-bit quantization.
	fourBitArgs = []arg{
		choiceArg("block", []string{"64", "128", "256", "512", "1024", "2048", "4096"}, []int{64, 128, 256, 512, 1024, 2048, 4096},
			func(p Plugin) *int { return &p.(*quant.FourBit).BlockSize }),
		skipArg(func(p Plugin) *[]string { return &p.(*quant.FourBit).Skip }),
	}
	// LLM.int8()'s outlier threshold (bitsandbytes' llm_int8_threshold)
	// and the Linears left in float (llm_int8_skip_modules).
	int8Args = []arg{
		floatArg("threshold", "0 (no outlier decomposition) or a positive number", func(x float64) bool { return x >= 0 && float32(x) <= math.MaxFloat32 },
			func(p Plugin, x float64) { p.(*quant.Int8).Threshold = float32(x) }),
		skipArg(func(p Plugin) *[]string { return &p.(*quant.Int8).Skip }),
	}
	// torch.amp.GradScaler's constructor arguments.
	scalerArgs = []arg{
		floatArg("init_scale", "a positive number float32 holds", func(x float64) bool { return float32(x) > 0 && float32(x) <= math.MaxFloat32 },
			func(p Plugin, x float64) { p.(MixedScaled).SetScale(x) }),
		floatArg("growth_factor", "a number above 1", func(x float64) bool { return x > 1 && x <= math.MaxFloat64 },
			func(p Plugin, x float64) { p.(MixedScaled).GrowthFactor = x }),
		floatArg("backoff_factor", "a number between 0 and 1, both excluded", func(x float64) bool { return x > 0 && x < 1 },
			func(p Plugin, x float64) { p.(MixedScaled).BackoffFactor = x }),
		intArg("growth_interval", 1, math.MaxInt32, func(p Plugin) *int { return &p.(MixedScaled).GrowthInterval }),
	}
)

// FSDP2's MixedPrecisionPolicy (CommPolicy) on the plugins that train
// the parameters themselves.
var (
	trueArgs        = append(commArgs(func(p Plugin) *CommPolicy { return &p.(*True).Comm }), stochasticRoundArg)
	mixedArgs       = commArgs(func(p Plugin) *CommPolicy { return &p.(*Mixed).Comm })
	mixedScaledArgs = append(slices.Clip(scalerArgs), commArgs(func(p Plugin) *CommPolicy { return &p.(MixedScaled).Mixed.Comm })...)
)

// stochasticRoundArg is torchao's bf16_stochastic_round, which only
// bfloat16 parameters take.
var stochasticRoundArg = func() arg {
	a := choiceArg("stochastic_round", []string{"false", "true"}, []bool{false, true}, func(p Plugin) *bool { return &p.(*True).Stochastic })
	a.refuse = func(p Plugin) string {
		if dt := p.(*True).DType; dt != dtype.BF16 {
			return fmt.Sprintf("%s stores parameters in %s; stochastic rounding is for bfloat16 ones (bf16-true)", p.Name(), dt)
		}
		return ""
	}
	return a
}()

// commArgs are FSDP2's param_dtype and reduce_dtype, spelled as
// PyTorch's dtypes are.
func commArgs(policy func(Plugin) *CommPolicy) []arg {
	names, dts := []string{"bfloat16", "float16", "float32"}, []dtype.DType{dtype.BF16, dtype.F16, dtype.F32}
	return []arg{
		choiceArg("param_dtype", names, dts, func(p Plugin) *dtype.DType { return &policy(p).ParamDType }),
		choiceArg("reduce_dtype", names, dts, func(p Plugin) *dtype.DType { return &policy(p).ReduceDType }),
	}
}

// formatArg is an FP8 recipe's format, named as Transformer Engine's
// recipe.Format members are.
func formatArg(field func(Plugin) *fp8.Format) arg {
	return choiceArg("format", []string{"hybrid", "e4m3", "e5m2"}, []fp8.Format{fp8.Hybrid, fp8.E4M3, fp8.E5M2}, field)
}

// intArg is an integer argument from lo to hi.
func intArg(name string, lo, hi int, field func(Plugin) *int) arg {
	return arg{name: name, want: fmt.Sprintf("an integer from %d to %d", lo, hi), parse: func(v string) (func(Plugin), string, bool) {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return nil, "", false
		}
		return func(p Plugin) { *field(p) = n }, strconv.Itoa(n), true
	}}
}

// floatArg is a number argument that ok accepts (want says which), set
// on a plugin by set.
func floatArg(name, want string, ok func(float64) bool, set func(Plugin, float64)) arg {
	return arg{name: name, want: want, parse: func(v string) (func(Plugin), string, bool) {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !ok(x) {
			return nil, "", false
		}
		return func(p Plugin) { set(p, x) }, strconv.FormatFloat(x, 'g', -1, 64), true
	}}
}

// skipArg is a quantizer's Skip list: module patterns joined by "|"
// (skip=head|blocks.0.*), or none to quantize every Linear.
func skipArg(field func(Plugin) *[]string) arg {
	return arg{name: "skip", want: `module patterns joined by | (as in head|blocks.0.*), or none`, parse: func(v string) (func(Plugin), string, bool) {
		var patterns []string
		if v != "none" {
			patterns = strings.Split(v, "|")
		}
		for i, pat := range patterns {
			patterns[i] = strings.TrimSpace(pat)
			if _, err := path.Match(strings.ReplaceAll(patterns[i], ".", "/"), ""); patterns[i] == "" || err != nil {
				return nil, "", false
			}
		}
		if len(patterns) == 0 {
			return func(p Plugin) { *field(p) = nil }, "none", true
		}
		return func(p Plugin) { *field(p) = slices.Clone(patterns) }, strings.Join(patterns, "|"), true
	}}
}

// choiceArg is an argument spelled as one of names, which set values.
func choiceArg[T any](name string, names []string, values []T, field func(Plugin) *T) arg {
	want := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	return arg{name: name, want: want, parse: func(v string) (func(Plugin), string, bool) {
		for i, n := range names {
			if strings.EqualFold(v, n) {
				return func(p Plugin) { *field(p) = values[i] }, n, true
			}
		}
		return nil, "", false
	}}
}

// parseArgs reads the "ARG=VALUE,..." of a spec whose plugin is like
// sample into a setter for a fresh plugin of the spec and the arguments'
// canonical spelling, in the table's order. The arguments belong to the
// plugin when it takes any (transformer-engine), else to its first member
// that does but for FSDP2's policy (bf16-fp8's are the recipe's: spell
// bf16-mixed(reduce_dtype=float32)+fp8 for the policy).
func parseArgs(sample Plugin, text string) (set func(Plugin), canonical string, err error) {
	member := -1
	table := argsOf(sample)
	for i, m := range Members(sample) {
		if table != nil {
			break
		}
		if _, policy := m.(commPolicied); policy && m != sample {
			continue
		}
		if table = argsOf(m); table != nil {
			member = i
		}
	}
	if table == nil {
		return nil, "", fmt.Errorf("%s takes no arguments", sample.Name())
	}
	target := sample // the member the arguments set
	if member >= 0 {
		target = Members(sample)[member]
	}
	setters := make([]func(Plugin), len(table))
	canon := make([]string, len(table))
	for _, kv := range strings.Split(text, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, "", fmt.Errorf("argument %q: want ARG=VALUE", strings.TrimSpace(kv))
		}
		i := slices.IndexFunc(table, func(a arg) bool { return a.name == k })
		if i < 0 {
			names := make([]string, len(table))
			for j, a := range table {
				names[j] = a.name
			}
			return nil, "", fmt.Errorf("unknown argument %s; accepted: %s", k, strings.Join(names, ", "))
		}
		if setters[i] != nil {
			return nil, "", fmt.Errorf("argument %s given twice", k)
		}
		if setters[i], canon[i], ok = table[i].parse(v); !ok {
			return nil, "", fmt.Errorf("%s=%s: want %s", k, v, table[i].want)
		}
		if r := table[i].refuse; r != nil {
			if why := r(target); why != "" {
				return nil, "", fmt.Errorf("%s=%s: %s", k, v, why)
			}
		}
		canon[i] = k + "=" + canon[i]
	}
	set = func(p Plugin) {
		if member >= 0 {
			p = Members(p)[member]
		}
		for _, s := range setters {
			if s != nil {
				s(p)
			}
		}
	}
	return set, strings.Join(slices.DeleteFunc(canon, func(c string) bool { return c == "" }), ","), nil
}
