package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/train"
)

// tinyLoRARun is a run.yaml of a tiny gpt for LoRA runs.
const tinyLoRARun = "model: {gpt: {layers: 2, width: 32, heads: 2, context: 16}}\ndata: {batch_size: 4, corpus_bytes: 262144}\neval: {every: 4, batches: 1}\n"

// TestLoRAResumeIsExact: QLoRA adapters trained by weft train for 6 steps
// and resumed to 12 equal 12 straight steps bit for bit, in the losses and
// in every checkpoint file, on one device and on two ranks of fsdp; the
// checkpoint holds the adapters and their AdamW moments (and steps no
// other parameter), weft inspect lists them and weft consolidate joins
// fsdp's shards of the moments whole.
func TestLoRAResumeIsExact(t *testing.T) {
	for _, s := range []struct{ strategy, devices string }{{"single", "1"}, {"fsdp", "2"}} {
		t.Run(s.strategy, func(t *testing.T) {
			cfg := writeFile(t.TempDir(), "run.yaml", []byte(tinyLoRARun))
			train := func(out, steps string, more ...string) {
				t.Helper()
				args := append([]string{"train", "--config", cfg, "--precision", "bf16-true+nf4-dq", "--lora", "blocks.*.qkv,blocks.*.fc",
					"--strategy", s.strategy, "--devices", s.devices, "--steps", steps, "--out", out}, more...)
				if msg, code := run(args...); code != 0 {
					t.Fatalf("weft %s: exit %d\n%s", strings.Join(args, " "), code, msg)
				}
			}
			straight, split := t.TempDir(), t.TempDir()
			train(straight, "12")
			train(split, "6")
			train(split, "12", "--resume")
			if a, b := losses(t, straight), losses(t, split); !slices.Equal(a, b) {
				t.Errorf("losses straight %v, resumed %v", a, b)
			}
			sameCheckpointFiles(t, straight, split)
			names := adaptersAndMoments(t, straight)
			msg, code := run("inspect", split)
			for _, name := range names {
				if code != 0 || !strings.Contains(msg, name+" ") {
					t.Fatalf("weft inspect (exit %d) does not list %s:\n%s", code, name, msg)
				}
			}
			wholeMoments(t, split, names)
		})
	}
}

// losses are the losses run's metrics.jsonl logged, as written.
func losses(t *testing.T, run string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(run, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m struct{ Loss json.Number }
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m.Loss.String())
	}
	return out
}

// sameCheckpointFiles requires the latest checkpoints of runs a and b to
// hold the same safetensors files, byte for byte.
func sameCheckpointFiles(t *testing.T, a, b string) {
	t.Helper()
	ma, da, err := train.ReadManifest(filepath.Join(a, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	_, db, err := train.ReadManifest(filepath.Join(b, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range ma.Files() {
		x, errA := os.ReadFile(filepath.Join(da, name))
		y, errB := os.ReadFile(filepath.Join(db, name))
		if errA != nil || errB != nil || !bytes.Equal(x, y) {
			t.Errorf("%s of the resumed run differs from the straight run's (%v, %v)", name, errA, errB)
		}
	}
}

// adaptersAndMoments checks that the latest checkpoint of run steps the
// adapters of blocks.{0,1}.{qkv,fc} and nothing else, and that its
// digests cover them and their moments, whose names it returns.
func adaptersAndMoments(t *testing.T, run string) []string {
	t.Helper()
	m, _, err := train.ReadManifest(filepath.Join(run, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	var want, names []string
	for _, block := range []string{"0", "1"} {
		for _, layer := range []string{"qkv", "fc"} {
			for _, ab := range []string{"lora_A", "lora_B"} {
				p := "blocks." + block + "." + layer + "." + ab + ".weight"
				want = append(want, p)
				names = append(names, "model."+p, "optim."+p+".exp_avg", "optim."+p+".exp_avg_sq")
			}
		}
	}
	var stepped []string
	for p, n := range m.OptimizerSteps {
		if n != m.Step {
			t.Errorf("manifest: %s took %d optimizer steps of %d", p, n, m.Step)
		}
		stepped = append(stepped, p)
	}
	for _, name := range names {
		if !slices.ContainsFunc(m.Files(), func(f string) bool { _, ok := m.Digests[f].Tensors[name]; return ok }) {
			t.Errorf("manifest: no file's digests cover %s", name)
		}
	}
	slices.Sort(want)
	slices.Sort(stepped)
	if !slices.Equal(stepped, want) {
		t.Errorf("manifest: optimizer steps of %v, want the adapters %v", stepped, want)
	}
	return names
}

// wholeMoments checks that weft consolidate writes the adapters of run
// folder dir and their moments (names) whole, in the adapters' shapes.
func wholeMoments(t *testing.T, dir string, names []string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "whole.safetensors")
	if msg, code := run("consolidate", dir, out); code != 0 {
		t.Fatalf("weft consolidate: exit %d\n%s", code, msg)
	}
	f, err := checkpoint.ReadSafetensors(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		param := name
		if moment, ok := strings.CutPrefix(name, "optim."); ok {
			param = "model." + strings.TrimSuffix(strings.TrimSuffix(moment, "_sq"), ".exp_avg")
		}
		p, ok1 := f.Tensor(param)
		t2, ok2 := f.Tensor(name)
		if !ok1 || !ok2 || !slices.Equal(p.Shape, t2.Shape) {
			t.Errorf("consolidated %s: %v %v, want it beside %s of that shape", name, t2.Shape, ok2, param)
		}
	}
}
