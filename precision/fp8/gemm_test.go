package fp8

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/tensor"
)

func referenceDir() string { return models.ReferenceDir("../../" + models.DefaultReferenceDir) }

// TestParityFP8GEMM runs every case of fp8gemm.safetensors: x and w cast
// to E4M3 with their stored scales, multiplied with the inverse scales,
// against cuBLASLt's FP8 GEMM. FP8 tensor cores accumulate with reduced
// precision (about 3e-4 of max|out|); a wrong cast or scale costs 1e-2.
func TestParityFP8GEMM(t *testing.T) {
	f, err := checkpoint.ReadSafetensors(filepath.Join(referenceDir(), "fp8gemm.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []string
	for _, name := range f.Names() {
		if c, _, ok := strings.Cut(name, "."); ok && !slices.Contains(cases, c) {
			cases = append(cases, c)
		}
	}
	if len(cases) == 0 {
		t.Fatal("fp8gemm.safetensors has no cases")
	}
	for _, c := range cases {
		t.Run(c, func(t *testing.T) {
			get := func(key string) *tensor.Tensor {
				t.Helper()
				st, ok := f.Tensor(c + "." + key)
				if !ok {
					t.Fatalf("case %s has no tensor %q", c, key)
				}
				v, err := tensor.FromBytes(st.DType, st.Data, st.Shape...)
				if err != nil {
					t.Fatalf("%s.%s: %v", c, key, err)
				}
				return v
			}
			x, w, want := get("x"), get("w"), get("out")
			if got := fmt.Sprintf("%dx%dx%d", x.Dim(0), x.Dim(1), w.Dim(0)); got != c {
				t.Fatalf("x is %v and w %v: case %s, want %s", x.Shape(), w.Shape(), got, c)
			}
			qx := castScaled(x, get("x_scale").Float32s()[0], dtype.E4M3FN)
			qw := castScaled(w, get("w_scale").Float32s()[0], dtype.E4M3FN)
			got := matmul(qx, qw, false, true, dtype.F32)
			if !got.SameShape(want) {
				t.Fatalf("out is %v, reference %v", got.Shape(), want.Shape())
			}
			var maxDiff, maxOut float64
			ref := want.Float64s()
			for i, g := range got.Float64s() {
				maxDiff = max(maxDiff, math.Abs(g-ref[i]))
				maxOut = max(maxOut, math.Abs(ref[i]))
			}
			ratio := maxDiff / maxOut
			t.Logf("%s: max|diff| / max|out| = %.3g", c, ratio)
			if !(ratio <= 1e-3) {
				t.Errorf("max|diff| = %.3g is %.3g of max|out| = %.3g, want <= 1e-3", maxDiff, ratio, maxOut)
			}
		})
	}
}
