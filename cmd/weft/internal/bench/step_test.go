package bench

import (
	"context"
	"math"
	"runtime"
	"testing"

	"github.com/weftml/weft/data"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/tensor"
)

// TestStepAllocations checks that a steady training step of the small
// reference models allocates nothing: activations, gradients, tensor
// headers and tape nodes all come back from the previous step.
func TestStepAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	for _, model := range []string{"mlp", "cnn", "gpt"} {
		for _, spec := range []string{"32-true", "bf16-mixed"} {
			s, err := newStep(context.Background(), StepConfig{Model: model}, mustParse(t, spec))
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if err := s.run(); err != nil {
					t.Fatal(err)
				}
			}
			if n := testing.AllocsPerRun(10, func() {
				if err := s.run(); err != nil {
					t.Fatal(err)
				}
			}); n != 0 {
				t.Errorf("%s %s: %v allocations per step, want 0", model, spec, n)
			}
		}
	}
}

func mustParse(tb testing.TB, spec string) precision.Plugin {
	tb.Helper()
	p, err := precision.Parse(spec, precision.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// TestStepMemorySteady checks that the tensor pool reaches its steady
// state in the first step: from step 2 on, Live between steps, the peak
// within them and the bytes the pool holds no longer change, so nothing
// a step allocates is left behind, in every family of precision (the int8
// GEMMs once left every temporary behind, 130 MiB a step on a small gpt).
func TestStepMemorySteady(t *testing.T) {
	specs := []string{"32-true", "bf16-mixed", "16-mixed", "transformer-engine", "bf16-true+nf4-dq",
		"bf16-true+int8", "bf16-true+int8-training"}
	for _, model := range []string{"mlp", "cnn", "gpt"} {
		for _, spec := range specs {
			s, err := newStep(context.Background(), StepConfig{Model: model}, mustParse(t, spec))
			if err != nil {
				t.Fatal(err)
			}
			tensor.ResetPeak()
			before := tensor.Memory()
			var after [5]tensor.MemStats
			for i := range after {
				if err := s.run(); err != nil {
					t.Fatal(err)
				}
				after[i] = tensor.Memory()
			}
			if after[1] != after[4] {
				t.Errorf("%s %s: pool after step 2 %+v, after step 5 %+v", model, spec, after[1], after[4])
			}
			t.Logf("%s %s: peak %d bytes, %d live between steps, %d reserved (above what was before step 1)",
				model, spec, after[4].Peak-before.Live, after[4].Live-before.Live, after[4].Reserved-before.Reserved)
		}
	}
}

// TestStepReportsAGPTOfAnySize times a gpt sized by hand and checks what
// the report derives: the parameter count against the architecture's
// formula, the FLOP rate against 6·N·tokens over the median step, and a
// peak at least the size of weights, gradients and AdamW's two moments.
func TestStepReportsAGPTOfAnySize(t *testing.T) {
	g := models.GPTConfig{Layers: 2, Width: 32, Heads: 4, Context: 16}
	r, err := Step(context.Background(), StepConfig{Model: "gpt", Precision: "32-true", Steps: 3, GPT: g, Batch: 3})
	if err != nil {
		t.Fatal(err)
	}
	c, v := int64(g.Width), int64(data.VocabSize)
	// Per block: 2 LayerNorms, qkv, proj, fc, out; then ln_f, pos, tok, head.
	want := int64(g.Layers)*(12*c*c+13*c) + 2*c + int64(g.Context)*c + 2*v*c
	if r.Params != want || r.Batch != 3 {
		t.Errorf("params %d, batch %d; want %d, 3", r.Params, r.Batch, want)
	}
	if flops := 6 * float64(want) * 3 * 16 / (r.MS / 1e3) / 1e9; math.Abs(r.GFLOPS-flops) > 1e-9*flops {
		t.Errorf("%.6g GFLOP/s, want %.6g at %.3f ms", r.GFLOPS, flops, r.MS)
	}
	if r.PeakAlloc < 16*want {
		t.Errorf("peak alloc %d bytes, below the %d of f32 weights, grads and two moments", r.PeakAlloc, 16*want)
	}
	if r.CoresBusy <= 0 || r.CoresBusy > float64(runtime.NumCPU())+0.5 {
		t.Errorf("cores busy %.2f on %d CPUs", r.CoresBusy, runtime.NumCPU())
	}
	if runtime.GOOS == "linux" && r.PeakRSS < r.PeakAlloc {
		t.Errorf("peak RSS %d below the allocator's peak %d", r.PeakRSS, r.PeakAlloc)
	}
	// Frozen quantized weights are the model's too: N does not change.
	for _, spec := range []string{"bf16-true+nf4-dq", "bf16-true+int8"} {
		q, err := Step(context.Background(), StepConfig{Model: "gpt", Precision: spec, Steps: 1, GPT: g, Batch: 3})
		if err != nil || q.Params != want {
			t.Errorf("%s: params %d (%v), want %d", spec, q.Params, err, want)
		}
	}
	if _, err := Step(context.Background(), StepConfig{Model: "mlp", Precision: "32-true", Steps: 1, GPT: g}); err == nil {
		t.Error("a gpt size for mlp was accepted")
	}
}
