package main

import (
	"io"
	"math"
	"testing"

	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/precision"
)

const rule = "kind:LayerNorm=f64-layernorm"

// TestPlan: the plan training follows runs every LayerNorm's layer_norm in
// float64 and every Linear's GEMM in bfloat16.
func TestPlan(t *testing.T) {
	pol, scaling, err := precision.ParsePolicy("bf16-mixed", []string{rule}, "auto", precision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := models.NewMeta("gpt", 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := fabric.MakePlan(m, pol, scaling, "single", 1)
	if err != nil {
		t.Fatal(err)
	}
	norms, linears := 0, 0
	for _, mp := range p.Modules {
		switch mp.Kind {
		case "LayerNorm":
			norms++
			if mp.Compute["norm"] != "float64" || len(mp.Plugins) != 1 || mp.Plugins[0] != "f64-layernorm" {
				t.Errorf("%s: norm in %s under %v, want float64 under f64-layernorm", mp.Path, mp.Compute["norm"], mp.Plugins)
			}
		case "Linear":
			linears++
			if mp.Compute["gemm"] != "bfloat16" || mp.Compute["norm"] != "float32" {
				t.Errorf("%s: gemm %s, norm %s; want bf16-mixed's bfloat16 and float32", mp.Path, mp.Compute["gemm"], mp.Compute["norm"])
			}
		}
	}
	if want := 2*models.ReferenceGPT.Layers + 1; norms != want || linears == 0 {
		t.Errorf("%d LayerNorms and %d Linears in the plan, want %d and some", norms, linears, want)
	}
}

// TestRun trains the example: finite losses that fall.
func TestRun(t *testing.T) {
	losses, err := run(io.Discard, "bf16-mixed", rule, 20)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range losses {
		if math.IsNaN(l) || math.IsInf(l, 0) {
			t.Fatalf("step %d: loss %v", i, l)
		}
	}
	if first, last := losses[0], losses[len(losses)-1]; !(last < 0.9*first) {
		t.Errorf("loss went from %.4f to %.4f, want a fall of 10%% at least", first, last)
	}
}
