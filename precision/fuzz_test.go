package precision_test

import (
	"testing"

	"github.com/weftml/weft/precision"
)

// FuzzParse: any spec string gives a plugin with a name, or an error.
func FuzzParse(f *testing.F) {
	for _, s := range append(precision.Specs(), "bf16-mixed+fp8", "bf16-true+nf4-dq", "params=float32,compute=bfloat16,output=float32", "16-mixed+bf16-mixed", "+", "=", "a=b=c", "bf16-mixed+fp8(margin=1,history=16,algo=max)", "nf4(block=64)", "fp8(", "fp8(=)") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		p, err := precision.Parse(spec, precision.Options{})
		if err == nil && p.Name() == "" {
			t.Fatalf("%q parsed to a plugin without a name", spec)
		}
	})
}

// FuzzParseRule: any --precision-for value gives a rule or an error.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"vision.**=16-mixed", "kind:Conv2d=bf16-true", "blocks.*.fc=params=float32,compute=bfloat16", "=32-true", "**=", "a.b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if r, err := precision.ParseRule(s, precision.Options{}); err == nil && r.Pattern == "" {
			t.Fatalf("%q gave a rule without a pattern", s)
		}
	})
}

// FuzzSpecString: the String of any spec that parses parses back to itself.
func FuzzSpecString(f *testing.F) {
	for _, s := range []string{"bf16-mixed + fp8(history=16, margin=01)", "transformer-engine(algo=MAX)", "nf4-dq(block=128)", "params=float32,compute=bfloat16,output=float32", "bf16+fp8-mx(format=e5m2)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		sp, err := precision.ParseSpec(spec, precision.Options{})
		if err != nil {
			return
		}
		again, err := precision.ParseSpec(sp.String(), precision.Options{})
		if err != nil || again.String() != sp.String() {
			t.Fatalf("%q: String %q parses to %q, %v", spec, sp.String(), again.String(), err)
		}
	})
}
