package hf_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/torchoracle"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/models/hf"
	"github.com/weftml/weft/tensor"
)

var oracle = filepath.Join("..", "..", "testdata", "hf", "oracle.py")

// logits runs m on b in float32.
func logits(t *testing.T, m models.Model, b data.Batch) []float64 {
	t.Helper()
	tp := &autograd.Tape{NoGrad: true}
	out, err := m.Forward(tp, b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Value.DType() != dtype.F32 {
		t.Fatalf("logits are %v, want float32", out.Value)
	}
	return out.Value.Float64s()
}

// TestPyTorchRoundTrip: models PyTorch builds in each layout (random
// weights, tied and untied heads, both GELUs, grouped-query attention) load
// into weft with logits within 1e-5 of PyTorch's on the same tokens;
// weft's export of each has the file's tensors bit for bit and loads back
// into PyTorch with the same logits. One start of the oracle makes every
// model and one runs every export: torch takes seconds to import.
func TestPyTorchRoundTrip(t *testing.T) {
	torchoracle.Need(t)
	cases := []struct {
		name string
		args []string
		want func(m models.Model) bool // the options the config must have set
	}{
		{"gpt2/tied/gelu_new", []string{"gpt2", "--tied", "--act", "gelu_new"}, func(m models.Model) bool {
			g := m.(*models.GPT).Config()
			return g.TiedHead && g.TanhGELU
		}},
		{"gpt2/untied/gelu", []string{"gpt2", "--act", "gelu"}, func(m models.Model) bool {
			g := m.(*models.GPT).Config()
			return !g.TiedHead && !g.TanhGELU
		}},
		{"llama/untied", []string{"llama"}, func(m models.Model) bool { return !m.(*models.Llama).Config().TiedHead }},
		{"llama/tied", []string{"llama", "--tied"}, func(m models.Model) bool { return m.(*models.Llama).Config().TiedHead }},
		{"llama/grouped-query", []string{"llama", "--kv", "2"}, func(m models.Model) bool { return m.(*models.Llama).Config().KV() == 2 }},
	}
	root := t.TempDir()
	made, exported, refs := make([]string, len(cases)), make([]string, len(cases)), make([]string, len(cases))
	var makeJobs, runJobs []string
	for i, c := range cases {
		made[i], exported[i] = filepath.Join(root, fmt.Sprint("torch", i)), filepath.Join(root, fmt.Sprint("weft", i))
		refs[i] = filepath.Join(made[i], "reference.safetensors")
		if err := os.Mkdir(made[i], 0o755); err != nil {
			t.Fatal(err)
		}
		makeJobs = append(append(makeJobs, ",", c.args[0], made[i]), c.args[1:]...)
		runJobs = append(runJobs, ",", exported[i], refs[i], filepath.Join(exported[i], "logits.safetensors"))
	}
	torchoracle.Run(t, oracle, append([]string{"make"}, makeJobs[1:]...)...)
	for i, c := range cases {
		t.Run("import/"+c.name, func(t *testing.T) {
			m, err := hf.Open(made[i])
			if err != nil {
				t.Fatal(err)
			}
			if !c.want(m) {
				t.Fatalf("config.json gave %T %+v", m, m)
			}
			b, want := torchoracle.Read(t, refs[i])
			e := torchoracle.Normwise(logits(t, m, b), want)
			t.Logf("weft vs PyTorch: max|Δ|/max|torch| = %.3g", e)
			if e > torchoracle.Tol {
				t.Errorf("weft's logits differ from PyTorch's by %.3g (max|Δ|/max|torch|), more than %g", e, torchoracle.Tol)
			}
			if err := hf.Save(exported[i], c.args[0], m); err != nil {
				t.Fatal(err)
			}
			sameTensors(t, filepath.Join(made[i], hf.WeightsFile), filepath.Join(exported[i], hf.WeightsFile))
		})
	}
	if t.Failed() {
		return
	}
	// weft's own reference models, exported, are the other direction's
	// test: PyTorch must compute weft's logits from weft's files alone.
	natives := []string{"gpt", "llama"}
	tokens := data.Batch{Shape: []int{2, 12}}
	for i := range 24 {
		tokens.Tokens = append(tokens.Tokens, i*13%48)
	}
	tokensFile := torchoracle.WriteTokens(t, root, tokens)
	for _, name := range natives {
		m, err := models.New(name, 7)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, "native-"+name)
		if err := hf.Save(dir, "", m); err != nil {
			t.Fatal(err)
		}
		runJobs = append(runJobs, ",", dir, tokensFile, filepath.Join(dir, "logits.safetensors"))
	}
	torchoracle.Run(t, oracle, append([]string{"run"}, runJobs[1:]...)...)
	for _, name := range natives {
		t.Run("export/native-"+name, func(t *testing.T) {
			m, _ := models.New(name, 7)
			_, torch := torchoracle.Read(t, filepath.Join(root, "native-"+name, "logits.safetensors"))
			e := torchoracle.Normwise(logits(t, m, tokens), torch)
			t.Logf("weft's %s vs PyTorch on its export: %.3g", name, e)
			if e > torchoracle.Tol {
				t.Errorf("PyTorch's logits of weft's exported %s differ from weft's by %.3g, more than %g", name, e, torchoracle.Tol)
			}
		})
	}
	for i, c := range cases {
		t.Run("export/"+c.name, func(t *testing.T) {
			_, want := torchoracle.Read(t, refs[i])
			_, back := torchoracle.Read(t, filepath.Join(exported[i], "logits.safetensors"))
			e := torchoracle.Normwise(back, want)
			t.Logf("PyTorch on weft's export vs the original: %.3g", e)
			if e > torchoracle.Tol {
				t.Errorf("PyTorch's logits of weft's export differ from the original's by %.3g, more than %g", e, torchoracle.Tol)
			}
		})
	}
}

// sameTensors requires b to hold a's tensors with the same bytes.
func sameTensors(t *testing.T, a, b string) {
	t.Helper()
	fa, err := checkpoint.ReadSafetensors(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := checkpoint.ReadSafetensors(b)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(fa.Names(), " ") != strings.Join(fb.Names(), " ") {
		t.Fatalf("export holds %v, the original %v", fb.Names(), fa.Names())
	}
	for _, name := range fa.Names() {
		x, _ := fa.Tensor(name)
		y, _ := fb.Tensor(name)
		if x.DType != y.DType || !tensor.EqualShape(x.Shape, y.Shape) || !bytes.Equal(x.Data, y.Data) {
			t.Errorf("%s: exported %v%v differs from the original %v%v", name, y.DType, y.Shape, x.DType, x.Shape)
		}
	}
}
