package precision_test

import (
	"fmt"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/fp8"
)

// TestTransformerEngineArgs: fallback and replace_layers are spelled
// canonically after the recipe's arguments and build the members the
// composition they stand for has: a jmp policy computing in the fallback
// dtype over the weights dtype, and the recipe unless replace_layers is
// false.
func TestTransformerEngineArgs(t *testing.T) {
	jmp := func(w, c dtype.DType) precision.Plugin {
		return precision.JMP{Params: w, Compute: c, Output: dtype.F32}
	}
	for _, c := range []struct {
		spec, canonical string
		weights         precision.Plugin
		recipe          bool
	}{
		{"transformer-engine", "bf16-true+fp8", precision.True{DType: dtype.BF16}, true},
		{"transformer-engine(fallback=float32)", "transformer-engine(fallback=float32)", jmp(dtype.BF16, dtype.F32), true},
		{"transformer-engine( replace_layers=False , fallback=FLOAT32, margin=01)", "transformer-engine(margin=1,fallback=float32,replace_layers=false)", jmp(dtype.BF16, dtype.F32), false},
		{"transformer-engine(fallback=bfloat16)", "transformer-engine(fallback=bfloat16)", precision.True{DType: dtype.BF16}, true},
		{"transformer-engine(replace_layers=true)", "transformer-engine(replace_layers=true)", precision.True{DType: dtype.BF16}, true},
		{"transformer-engine-float16(fallback=float32)", "transformer-engine-float16(fallback=float32)", jmp(dtype.F16, dtype.F32), true},
		{"transformer-engine(replace_layers=false)", "transformer-engine(replace_layers=false)", precision.True{DType: dtype.BF16}, false},
	} {
		sp, err := precision.ParseSpec(c.spec, precision.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if sp.String() != c.canonical {
			t.Errorf("ParseSpec(%q).String() = %q, want %q", c.spec, sp.String(), c.canonical)
		}
		if again, err := precision.ParseSpec(sp.String(), precision.Options{}); err != nil || again.String() != c.canonical {
			t.Errorf("%q parses back as %q, %v", c.canonical, again.String(), err)
		}
		p, err := sp.New()
		if err != nil {
			t.Fatal(err)
		}
		members := precision.Members(p)
		want := 1
		if c.recipe {
			want = 2
		}
		if len(members) != want || members[0] != c.weights {
			t.Errorf("%s: members %v, want %v and the recipe: %v", c.spec, members, c.weights, c.recipe)
			continue
		}
		if c.recipe {
			if _, ok := members[1].(*fp8.Delayed); !ok {
				t.Errorf("%s: second member %v, want the delayed recipe", c.spec, members[1])
			}
		}
	}
	d := precision.Members(mustParse(t, "transformer-engine(history=8,fallback=float32)", precision.Options{}))[1].(*fp8.Delayed)
	if d.HistoryLen != 8 {
		t.Errorf("transformer-engine(history=8,fallback=float32): history %d", d.HistoryLen)
	}
}

func TestTransformerEngineArgsBad(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"fallback=int8", "fallback=int8: want float64, float32, bfloat16 or float16"},
		{"fallback=", "fallback=: want float64, float32, bfloat16 or float16"},
		{"replace_layers=no", "replace_layers=no: want true or false"},
		{"replace=false", "unknown argument replace; accepted: margin, history, algo, format, fallback, replace_layers"},
		{"fallback=float32,fallback=float16", "argument fallback given twice"},
		{"margin=65", "margin=65: want an integer from 0 to 64"},
	} {
		spec := "transformer-engine(" + c.args + ")"
		want := fmt.Sprintf("precision %q: %s", spec, c.want)
		if _, err := precision.ParseSpec(spec, precision.Options{}); err == nil || err.Error() != want {
			t.Errorf("ParseSpec(%s) = %v, want %s", spec, err, want)
		}
	}
	if _, err := precision.ParseSpec("bf16-fp8(fallback=float32)", precision.Options{}); err == nil ||
		err.Error() != `precision "bf16-fp8(fallback=float32)": unknown argument fallback; accepted: margin, history, algo, format` {
		t.Errorf("fallback on bf16-fp8: %v", err)
	}
}
