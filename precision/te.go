package precision

import (
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/precision/fp8"
)

// transformerEngine is Lightning's TransformerEnginePrecision: weights and
// inputs in the weights dtype, each Linear replaced by one with FP8 GEMMs
// under the delayed-scaling recipe, and every other op computing in the
// fallback dtype. Its members are the weights' plugin (True, or a JMP
// policy when the fallback differs) and the recipe, so that the
// composition it stands for, spelled out, trains the same.
type transformerEngine struct {
	weights dtype.DType
	// fallback is Lightning's fallback_compute_dtype: the dtype of the ops
	// that do not run in FP8; Invalid means the weights dtype.
	fallback dtype.DType
	// replaceLayers false leaves every Linear as it is (Lightning's
	// replace_layers=False): nothing computes in FP8.
	replaceLayers bool
	recipe        *fp8.Delayed
}

func newTransformerEngine(weights dtype.DType) *transformerEngine {
	return &transformerEngine{weights: weights, replaceLayers: true, recipe: fp8.NewDelayed()}
}

func (t *transformerEngine) Name() string { return (&composite{members: t.Unwrap()}).Name() }

// Unwrap returns the members: the weights' plugin, then the recipe unless
// replace_layers is false.
func (t *transformerEngine) Unwrap() []Plugin {
	var weights Plugin = True{DType: t.weights}
	if t.fallback != dtype.Invalid && t.fallback != t.weights {
		weights = JMP{Params: t.weights, Compute: t.fallback, Output: dtype.F32}
	}
	if !t.replaceLayers {
		return []Plugin{weights}
	}
	return []Plugin{weights, t.recipe}
}

// transformerEngineArgs are the recipe's arguments, then Lightning's
// fallback_compute_dtype and replace_layers.
var transformerEngineArgs = append(onRecipe(delayedArgs),
	choiceArg("fallback", []string{"float64", "float32", "bfloat16", "float16"}, []dtype.DType{dtype.F64, dtype.F32, dtype.BF16, dtype.F16},
		func(p Plugin) *dtype.DType { return &p.(*transformerEngine).fallback }),
	choiceArg("replace_layers", []string{"true", "false"}, []bool{true, false},
		func(p Plugin) *bool { return &p.(*transformerEngine).replaceLayers }),
)

// onRecipe makes the recipe's arguments set the recipe of a
// transformerEngine.
func onRecipe(recipe []arg) []arg {
	out := make([]arg, len(recipe))
	for i, a := range recipe {
		out[i] = arg{name: a.name, want: a.want, parse: func(v string) (func(Plugin), string, bool) {
			set, canon, ok := a.parse(v)
			if !ok {
				return nil, "", false
			}
			return func(p Plugin) { set(p.(*transformerEngine).recipe) }, canon, true
		}}
	}
	return out
}
