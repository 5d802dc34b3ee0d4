package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftml/weft/models"
	"github.com/weftml/weft/precision"
)

// TestNoPanicReachesAUser runs every subcommand over every spec of
// precision.Specs() and, where the subcommand takes one, every model, on
// tiny sizes (one step), as the built binary, and fails on any Go panic
// or fatal error in its output. A refusal (a non-zero exit with a one-line
// error) passes: many of these compositions are meant to be refused.
func TestNoPanicReachesAUser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the spec × model × subcommand sweep takes a minute or two")
	}
	bin, dir := buildWeft(t), t.TempDir()
	tiny := writeFile(dir, "tiny.yaml", []byte("model: {gpt: {layers: 1, width: 16, heads: 2, context: 8}}\ndata: {corpus_bytes: 262144, batch_size: 4}\neval: {batches: 1, every: 1}\ncheckpoint: {save_every: 1}\n"))
	var training, afterwards [][]string
	for i, spec := range precision.Specs() {
		for _, model := range models.Names() {
			out := filepath.Join(dir, "run", spec, model)
			training = append(training,
				[]string{"plan", "--model", model, "--precision", spec},
				[]string{"train", "--config", tiny, "--model", model, "--precision", spec, "--steps", "1", "--out", out})
		}
		training = append(training,
			[]string{"plan", "--model", "gpt", "--precision", spec, "--strategy", "fsdp", "--devices", "2"},
			[]string{"train", "--config", tiny, "--precision", spec, "--steps", "1", "--strategy", "fsdp", "--devices", "2", "--out", filepath.Join(dir, "fsdp", spec)},
			[]string{"parity", "--model", "mlp", "--precision", spec, "--refs", "../../testdata/reference"},
			[]string{"parity", "--gpt", "1,16,2,8", "--precision", spec, "--strategy", "fsdp", "--devices", "2"},
			[]string{"bench", "step", "--gpt", "1,16,2,8", "--batch", "2", "--steps", "1", "--precisions", spec, "--min-time", "1ms"})
		// What reads a run: each spec's gpt run, and its llama run beside the previous spec's gpt.
		run, file := filepath.Join(dir, "run", spec, "gpt"), filepath.Join(dir, "file", spec+".safetensors")
		previous := filepath.Join(dir, "run", precision.Specs()[max(i-1, 0)], "gpt")
		afterwards = append(afterwards,
			[]string{"sample", "--ckpt", run, "--n", "4"},
			[]string{"inspect", run},
			[]string{"export", run, filepath.Join(dir, "hf", spec)},
			[]string{"export", filepath.Join(dir, "run", spec, "llama"), filepath.Join(dir, "hf-llama", spec)},
			[]string{"export", filepath.Join(dir, "run", spec, "cnn"), filepath.Join(dir, "hf-cnn", spec)},
			[]string{"consolidate", filepath.Join(dir, "fsdp", spec), file},
			[]string{"inspect", file},
			[]string{"compare", run, previous, filepath.Join(dir, "run", spec, "llama"), "--png", filepath.Join(dir, spec+".png")})
		for _, format := range []string{"nf4", "nf4-dq", "fp4", "int8", "fp8"} {
			afterwards = append(afterwards, []string{"quantize", "--format", format, file, filepath.Join(dir, "q", spec+format+".safetensors")})
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "file"), 0o755); err != nil {
		t.Fatal(err)
	}
	runAll(t, bin, training)
	runAll(t, bin, afterwards)
}

// runAll runs weft (bin) with each of runs, as many at a time as there are
// CPUs, and fails the test for each whose output holds a panic.
func runAll(t *testing.T, bin string, runs [][]string) {
	t.Helper()
	work := make(chan []string)
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Go(func() {
			for args := range work {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				out, _ := exec.CommandContext(ctx, bin, args...).CombinedOutput()
				cancel()
				if s := string(out); strings.Contains(s, "panic:") || strings.Contains(s, "fatal error:") || strings.Contains(s, "goroutine ") {
					t.Errorf("weft %s:\n%s", strings.Join(args, " "), tail(s, 3000))
				}
			}
		})
	}
	for _, args := range runs {
		work <- args
	}
	close(work)
	wg.Wait()
}

// tail is the last n bytes of s.
func tail(s string, n int) string { return s[max(0, len(s)-n):] }
