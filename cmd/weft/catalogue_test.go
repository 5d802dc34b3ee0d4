package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/bad-inputs.md from the catalogue")

// badInput is one bad thing a user can hand weft.
type badInput struct {
	what string
	args func(dir string) []string // dir: a scratch folder the case may fill
}

func writeFile(dir, name string, b []byte) string {
	p := filepath.Join(dir, name)
	os.WriteFile(p, b, 0o644)
	return p
}

var catalogue = []badInput{
	{"an unknown precision", func(string) []string { return []string{"plan", "--precision", "fp9"} }},
	{"conflicting plugins", func(string) []string { return []string{"plan", "--precision", "16-mixed+bf16-mixed"} }},
	{"two storage dtypes for one parameter", func(string) []string { return []string{"plan", "--precision", "bf16-true+16-true"} }},
	{"a malformed per-module rule", func(string) []string { return []string{"plan", "--precision-for", "vision.**"} }},
	{"equally specific rules", func(string) []string {
		return []string{"plan", "--model", "hybrid", "--precision-for", "vision.*=16-mixed", "--precision-for", "*.conv1=bf16-mixed"}
	}},
	{"float16 compute with loss scaling refused", func(string) []string {
		return []string{"plan", "--model", "hybrid", "--precision-for", "vision.**=16-mixed", "--loss-scale", "none"}
	}},
	{"two plugins replacing one Linear's arithmetic", func(string) []string { return []string{"plan", "--precision", "nf4-dq+nf4"} }},
	{"a per-module rule that matches no module", func(string) []string {
		return []string{"plan", "--model", "hybrid", "--precision-for", "nothere.**=16-mixed"}
	}},
	{"a per-module rule whose plugin converts nothing", func(string) []string {
		return []string{"plan", "--model", "cnn", "--precision-for", "head=fp8"}
	}},
	{"a bad jmp policy", func(string) []string { return []string{"plan", "--precision", "params=int8,compute=bfloat16"} }},
	{"an unknown model", func(string) []string { return []string{"plan", "--model", "resnet"} }},
	{"an unknown strategy", func(string) []string { return []string{"plan", "--strategy", "deepspeed"} }},
	{"zero devices", func(string) []string { return []string{"plan", "--devices", "0"} }},
	{"a missing reference folder", func(string) []string { return []string{"parity", "--refs", "/nonexistent"} }},
	{"an unknown flag", func(string) []string { return []string{"train", "--stepz", "3"} }},
	{"an unknown config key", func(dir string) []string {
		return []string{"train", "--config", writeFile(dir, "run.yaml", []byte("model: gpt\nstepz: 3\n"))}
	}},
	{"a config that is not YAML", func(dir string) []string {
		return []string{"train", "--config", writeFile(dir, "run.yaml", []byte("model: [gpt\n"))}
	}},
	{"a batch that does not split over the devices", func(dir string) []string {
		return []string{"train", "--batch-size", "15", "--devices", "2", "--out", dir}
	}},
	{"resume without a checkpoint", func(dir string) []string { return []string{"train", "--resume", "--out", dir} }},
	{"a checkpoint's latest pointing outside its folder", func(dir string) []string {
		os.MkdirAll(filepath.Join(dir, "checkpoints"), 0o755)
		writeFile(filepath.Join(dir, "checkpoints"), "latest", []byte("../../etc\n"))
		return []string{"train", "--resume", "--out", dir}
	}},
	{"a corrupt manifest", func(dir string) []string {
		ck := filepath.Join(dir, "checkpoints", "step-000010")
		os.MkdirAll(ck, 0o755)
		writeFile(filepath.Join(dir, "checkpoints"), "latest", []byte("step-000010\n"))
		writeFile(ck, "manifest.json", []byte(`{"format":"weft-checkpoint/1","step":-4}`))
		return []string{"train", "--resume", "--out", dir}
	}},
	{"a truncated safetensors file", func(dir string) []string {
		return []string{"inspect", writeFile(dir, "x.safetensors", []byte{0x40, 0, 0, 0, 0, 0, 0, 0, '{'})}
	}},
	{"a safetensors header claiming a huge size", func(dir string) []string {
		return []string{"inspect", writeFile(dir, "x.safetensors", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0})}
	}},
	{"overlapping tensors", func(dir string) []string {
		h := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`
		b := append([]byte{byte(len(h)), 0, 0, 0, 0, 0, 0, 0}, h...)
		return []string{"inspect", writeFile(dir, "x.safetensors", append(b, make([]byte, 12)...))}
	}},
	{"a path that does not exist", func(string) []string { return []string{"inspect", "/nonexistent/ckpt"} }},
	{"an unwritable output folder", func(dir string) []string {
		return []string{"train", "--steps", "1", "--out", writeFile(dir, "file", nil) + "/run"}
	}},
	{"sampling a run that does not exist", func(string) []string { return []string{"sample", "--ckpt", "/nonexistent"} }},
	{"an unknown bench", func(string) []string { return []string{"bench", "conv"} }},
}

// TestBadInputCatalogue runs every bad input: each must fail with one line
// that says what was wrong, never a panic; docs/bad-inputs.md lists them
// (go test ./cmd/weft -run Catalogue -update rewrites it).
func TestBadInputCatalogue(t *testing.T) {
	var doc strings.Builder
	doc.WriteString("# What weft answers to bad input\n\nGenerated by `go test ./cmd/weft -run Catalogue -update`; the test fails when this file is stale.\n\n| input | command | exit | answer |\n| --- | --- | --- | --- |\n")
	for _, c := range catalogue {
		dir := t.TempDir()
		args := c.args(dir)
		root := newRoot()
		root.SetArgs(args)
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		err := root.Execute()
		if err == nil || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "panic") {
			t.Errorf("%s (weft %s): want a one-line error, got %v", c.what, strings.Join(args, " "), err)
			continue
		}
		msg, code := err.Error(), exitCode(err)
		shown := strings.ReplaceAll(strings.Join(args, " "), dir, "DIR")
		fmt.Fprintf(&doc, "| %s | `weft %s` | %d | %s |\n", c.what, shown, code, strings.ReplaceAll(strings.ReplaceAll(msg, dir, "DIR"), "|", "\\|"))
	}
	path := "../../docs/bad-inputs.md"
	if *update {
		if err := os.WriteFile(path, []byte(doc.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if old, err := os.ReadFile(path); err != nil || string(old) != doc.String() {
		t.Errorf("%s is stale: run go test ./cmd/weft -run Catalogue -update", path)
	}
}
