package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// run executes weft with args in-process and returns its output and exit status.
func run(args ...string) (string, int) {
	var out bytes.Buffer
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&out)
	if err := root.Execute(); err != nil {
		return out.String() + err.Error(), exitCode(err)
	}
	return out.String(), 0
}

func TestCLI(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want []string // substrings of the output
	}{
		{[]string{"plan", "--model", "cnn", "--precision", "bf16-mixed"}, 0, []string{"conv1", "bfloat16", "float32"}},
		// weft plan takes weft train's flags, defaults and refusals.
		{[]string{"plan"}, 0, []string{"gpt: precision bf16-mixed; strategy single on 1 device(s)", "plan: the allocator peaks at"}},
		{[]string{"plan", "--model", "bigram", "--precision", "32-true"}, 0, []string{"bigram: precision 32-true", "tok", "head"}},
		{[]string{"plan", "--model", "mlp"}, 1, []string{`model "mlp" has no bundled dataset to train on`}},
		{[]string{"plan", "--batch", "8"}, 1, []string{"unknown flag: --batch"}},
		{[]string{"plan", "--lora", "blocks.*.qkv"}, 0, []string{"adapter blocks.0.qkv.lora_A.weight [8 64]: 2048 B", "adapter blocks.1.qkv.lora_B.weight [192 8]: 6144 B"}},
		{[]string{"plan", "--tp", "2", "--devices", "4", "--strategy", "ddp"}, 0, []string{"strategy ddp on 4 device(s): a mesh of 2 data-parallel rank(s) × 2 tensor-parallel"}},
		{[]string{"plan", "--memory-check", "maybe"}, 1, []string{`memory_check "maybe": accepted are on and off`}},
		{[]string{"plan", "--model", "hybrid", "--precision", "bf16-true", "--precision-for", "vision.**=16-mixed", "--json"}, 0,
			[]string{`"path":"vision.conv1"`, `"gemm":"float16"`, `"gemm":"bfloat16"`, "dynamic"}},
		{[]string{"plan", "--model", "gpt", "--precision", "transformer-engine", "--strategy", "fsdp", "--devices", "2"}, 0, []string{"fsdp on 2"}},
		{[]string{"plan", "--precision", "16-mixed+bf16-mixed"}, 2, []string{"role compute", "16-mixed", "bf16-mixed"}},
		{[]string{"plan", "--precision", "bf16-true+16-true"}, 2, []string{"role storage", "bf16-true", "16-true"}},
		{[]string{"plan", "--model", "hybrid", "--precision-for", "vision.**=16-mixed", "--precision-for", "decoder.**=16-mixed"}, 2,
			[]string{"role loss scaling", "module vision", "module decoder"}},
		{[]string{"plan", "--model", "hybrid", "--precision-for", "vision.**=params=float32,compute=float16", "--loss-scale", "none"}, 1, []string{"float16", "loss scaling"}},
		{[]string{"plan", "--precision", "bf16-true+nf4-dq"}, 0,
			[]string{"nf4-dq (weight frozen)", "nf4-dq(packed)/bfloat16", "50752", `warning: nf4-dq left 1 Linear(s) as they were: head is skipped`}},
		{[]string{"plan", "--model", "cnn", "--precision", "transformer-engine", "--json"}, 0,
			[]string{`"warnings":["fp8 converted no Linear: head is 576→10, FP8 needs in%8==0 and out%16==0; the run goes on without it"]`}},
		{[]string{"plan", "--precision", "nf4-dq+nf4"}, 2, []string{"role layer replacement claimed by nf4-dq (module blocks.0.qkv) and nf4 (module blocks.0.qkv)"}},
		{[]string{"plan", "--precision", "fp9"}, 1, []string{`"fp9" is not known`, "bf16-mixed"}},
		// Spec arguments reach the plugin and come back in the plan's name of it.
		{[]string{"plan", "--precision", "bf16-mixed+fp8(history=16, margin=1)"}, 0, []string{"precision bf16-mixed+fp8(margin=1,history=16);", "fp8 GEMMs"}},
		{[]string{"plan", "--precision-for", "blocks.*=bf16-mixed+fp8(algo=most_recent)"}, 0, []string{"blocks.*=bf16-mixed+fp8(algo=most_recent)"}},
		{[]string{"plan", "--precision", "fp8(margin=99)"}, 1, []string{`precision "fp8(margin=99)": margin=99: want an integer from 0 to 64`}},
		{[]string{"plan", "--model", "resnet"}, 1, []string{"unknown model", "gpt"}},
		{[]string{"plan", "--strategy", "deepspeed"}, 1, []string{"unknown strategy", "fsdp"}},
		{[]string{"parity", "--model", "mlp", "--precision", "bf16-mixed"}, 0, []string{"matches PyTorch's bf16-mixed run"}},
		{[]string{"parity", "--model", "mlp", "--dtype", "float64"}, 0, []string{"float64-manual"}},
		{[]string{"parity", "--model", "mlp", "--refs", "/nonexistent"}, 1, []string{"reference folder /nonexistent not found"}},
		{[]string{"train", "--steps", "0"}, 1, []string{"steps 0"}},
		{[]string{"inspect", "../../testdata/reference/fp8gemm.safetensors"}, 0, []string{"64x32x64.x", "float32", "8192"}},
		{[]string{"train", "--bogus"}, 1, []string{"unknown flag"}},
		// Lightning's notice on the alias "16", from train as from plan.
		{[]string{"train", "--model", "cnn", "--precision", "16", "--steps", "1", "--out", "TMP"}, 0, []string{"warning: precision 16 is supported for historical reasons"}},
		{[]string{"plan", "--precision", "16"}, 0, []string{"warning: precision 16 is supported for historical reasons"}},
		// A gpt of any size: 1 layer of width 16 has 12·16²+13·16 + ln_f 32 + pos 8·16 + tok and head 2·98·16 = 6,624 parameters.
		{[]string{"bench", "step", "--gpt", "1,16,2,8", "--batch", "2", "--steps", "1", "--precisions", "32-true", "--min-time", "1ms"}, 0,
			[]string{"weft-f32", "1024", "gpt", "32-true", "0.01M", "cores busy"}},
		{[]string{"bench", "gemm", "--sizes", "16", "--min-time", "1ms"}, 0, []string{"weft-f32  16"}},
		{[]string{"bench", "allreduce", "--sizes", "16"}, 1, []string{"unknown flag: --sizes"}},
		{[]string{"bench", "step", "--gpt", "1,16,3,8", "--steps", "1"}, 1, []string{"a width that the heads divide"}},
		{[]string{"bench", "step", "--gpt", "1,16,2"}, 1, []string{`--gpt "1,16,2": want layers,width,heads,context`}},
		{[]string{"bench", "step", "--gpt", "1,16,2,8", "--models", "mlp"}, 1, []string{"leave out --models"}},
		{[]string{"bench", "step", "--batch", "3"}, 1, []string{"--batch 3: a batch size goes with --gpt"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			if tt.args[0] == "parity" {
				tt.args = append(tt.args, "--refs", "../../testdata/reference")
				if strings.Contains(strings.Join(tt.args, " "), "/nonexistent") {
					tt.args = tt.args[:len(tt.args)-2]
				}
			}
			for i, a := range tt.args {
				if a == "TMP" {
					tt.args[i] = t.TempDir()
				}
			}
			out, code := run(tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d; output:\n%s", code, tt.code, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "panic") || strings.Contains(out, "goroutine") {
				t.Errorf("a panic reached the user:\n%s", out)
			}
		})
	}
}

// TestPlanAndTrainRefuseAlike: weft plan and weft train refuse the same
// precisions with the same message and exit status.
func TestPlanAndTrainRefuseAlike(t *testing.T) {
	for _, args := range [][]string{
		{"--precision", "nf4-dq+nf4"},
		{"--precision", "bf16-mixed+fp8(margin=99)"},
		{"--model", "hybrid", "--precision", "bf16-true+int8+fp8"},
		{"--model", "hybrid", "--precision-for", "nothere.**=16-mixed"},
		{"--model", "cnn", "--precision-for", "head=fp8"},
		{"--model", "cnn", "--precision-for", "conv1=16-mixed", "--precision-for", "head=16-mixed"},
		{"--model", "mlp"},
		{"--devices", "2"},
		{"--tp", "3", "--devices", "4"},
		{"--lora", "blocks.*.qkv", "--tp", "2", "--devices", "2"},
		{"--batch-size", "15", "--grad-accum", "2"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			plan, planCode := run(append([]string{"plan"}, args...)...)
			train, trainCode := run(append([]string{"train", "--steps", "1", "--out", t.TempDir()}, args...)...)
			if planCode == 0 || planCode != trainCode || plan != train {
				t.Errorf("plan: exit %d %q\ntrain: exit %d %q", planCode, plan, trainCode, train)
			}
		})
	}
}

// TestTrainWarnsOnce: weft train prints the plan's warnings once, under
// the plan, however many ranks it runs.
func TestTrainWarnsOnce(t *testing.T) {
	out, code := run("train", "--model", "cnn", "--precision", "transformer-engine", "--steps", "1", "--strategy", "ddp", "--devices", "2", "--out", t.TempDir())
	const warning = "warning: fp8 converted no Linear: head is 576→10, FP8 needs in%8==0 and out%16==0; the run goes on without it"
	if code != 0 || strings.Count(out, warning) != 1 {
		t.Errorf("exit %d; want the warning once in:\n%s", code, out)
	}
}

// TestPlanResolvesAsTrain: weft plan reads --config and lets the flags
// given override it, as weft train does: the file's size, precision and
// adapters stand unless a flag replaces them.
func TestPlanResolvesAsTrain(t *testing.T) {
	yaml := writeFile(t.TempDir(), "run.yaml", []byte("model: {gpt: {layers: 1, width: 32, heads: 2, context: 16}, lora: {targets: [blocks.0.fc]}}\nprecision: {spec: 32-true}\n"))
	out, code := run("plan", "--config", yaml, "--precision", "bf16-true", "--lora", "blocks.0.qkv")
	if code != 0 {
		t.Fatal(out)
	}
	for _, want := range []string{"gpt: precision bf16-true+lora;", "adapter blocks.0.qkv.lora_A.weight [8 32]"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"blocks.1.", "blocks.0.fc.lora_A"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("plan has %q:\n%s", unwanted, out)
		}
	}
}

// TestFlatConfigWarns: a config in the flat keys of before the groups
// still runs, each flat key a warning naming the key to write instead;
// AdamW's flags override the file's optim group.
func TestFlatConfigWarns(t *testing.T) {
	yaml := writeFile(t.TempDir(), "run.yaml", []byte("gpt: {layers: 1, width: 32, heads: 2, context: 16}\noptim: {beta1: 0.5}\n"))
	out, code := run("plan", "--config", yaml)
	if want := "weft: warning: config " + yaml + ": line 1: the flat key gpt is deprecated; write model.gpt"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("exit %d, want %q in:\n%s", code, want, out)
	}
	var f runFlags
	fs := pflag.NewFlagSet("train", pflag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse([]string{"--config", yaml, "--beta2", "0.9", "--eps", "1e-6", "--weight-decay", "0", "--clip-norm", "1"}); err != nil {
		t.Fatal(err)
	}
	c, err := f.resolve(fs, &bytes.Buffer{})
	if err != nil || c.Beta1 != 0.5 || c.Beta2 != 0.9 || c.Eps != 1e-6 || c.WeightDecay != 0 || c.ClipNorm != 1 || c.GPT.Width != 32 {
		t.Errorf("resolved %v, %+v", err, c.OptimConfig)
	}
}
