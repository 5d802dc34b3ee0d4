package precision_test

import (
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
)

// TestCommPolicyArgs: param_dtype and reduce_dtype spell FSDP2's
// MixedPrecisionPolicy on the true and mixed plugins, read back in their
// canonical order, and reach the gather and reduction roles.
func TestCommPolicyArgs(t *testing.T) {
	for _, c := range []struct {
		spec, canon    string
		gather, reduce dtype.DType
	}{
		{"bf16-true(reduce_dtype=float32)", "bf16-true(reduce_dtype=float32)", dtype.Invalid, dtype.F32},
		{"bf16-mixed(reduce_dtype=bfloat16,param_dtype=bfloat16)", "bf16-mixed(param_dtype=bfloat16,reduce_dtype=bfloat16)", dtype.BF16, dtype.BF16},
		{"16-mixed(param_dtype=float16)", "16-mixed(param_dtype=float16)", dtype.F16, dtype.Invalid},
		{"32-true(param_dtype=bfloat16)+fp8-current", "32-true(param_dtype=bfloat16)+fp8-current", dtype.BF16, dtype.Invalid},
		{"bf16-mixed", "bf16-mixed", dtype.Invalid, dtype.Invalid},
	} {
		s, err := precision.ParseSpec(c.spec, precision.Options{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.New()
		if err != nil {
			t.Fatal(err)
		}
		gather, scale, _ := precision.GatherFormat(p, "blocks.0.qkv.weight")
		reduce, _ := precision.ReduceDType(p, "blocks.0.qkv.weight")
		if s.String() != c.canon || gather != c.gather || scale != 0 || reduce != c.reduce {
			t.Errorf("%s: %s, gathers %s (scale %g), reduces %s; want %s, %s, %s", c.spec, s, gather, scale, reduce, c.canon, c.gather, c.reduce)
		}
	}
}

// TestScopeGatherFormat: without param_dtype a scope gathers the weights
// and biases its autocast rounds to a 16-bit format in that format (a
// Linear's under bf16-mixed and 16-mixed), and every other parameter (a
// LayerNorm's, an embedding's, any under a true precision) as stored.
func TestScopeGatherFormat(t *testing.T) {
	for _, c := range []struct {
		spec      string
		qkv, ln   dtype.DType
		tok, bias dtype.DType
	}{
		{"bf16-mixed", dtype.BF16, dtype.Invalid, dtype.Invalid, dtype.BF16},
		{"16-mixed", dtype.F16, dtype.Invalid, dtype.Invalid, dtype.F16},
		{"32-true", dtype.Invalid, dtype.Invalid, dtype.Invalid, dtype.Invalid},
		{"bf16-true", dtype.Invalid, dtype.Invalid, dtype.Invalid, dtype.Invalid},
		{"bf16-mixed(param_dtype=float32)", dtype.F32, dtype.F32, dtype.F32, dtype.F32},
	} {
		s, err := precision.ParseSpec(c.spec, precision.Options{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := precision.Policy{Default: s}.Resolve(models.NewGPT(nn.Meta(1), models.ReferenceGPT), precision.LossScalingAuto)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]dtype.DType{}
		for _, sc := range res.Scopes {
			for _, q := range sc.Module.Params() {
				got[nn.Join(sc.Path, q.Name)], _, _ = sc.GatherFormat(q.Name)
			}
		}
		for path, want := range map[string]dtype.DType{"blocks.0.qkv.weight": c.qkv, "blocks.0.qkv.bias": c.bias, "blocks.0.ln1.weight": c.ln, "tok.weight": c.tok} {
			if got[path] != want {
				t.Errorf("%s: %s gathers in %s, want %s", c.spec, path, got[path], want)
			}
		}
	}
}
