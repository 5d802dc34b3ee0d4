package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftml/weft/models/hf"
)

// TestExport: weft export writes a trained gpt as a GPT-2 folder that
// --init-from takes back (training on from it), and refuses an unknown
// layout, the wrong layout for the model, and a folder with no run, each
// in one line.
func TestExport(t *testing.T) {
	run1 := t.TempDir()
	tiny := []string{"train", "--model", "gpt", "--precision", "32-true", "--steps", "4", "--batch-size", "2", "--eval-every", "2", "--save-every", "4"}
	if out, code := run(append(tiny, "--out", run1)...); code != 0 {
		t.Fatalf("train: exit %d\n%s", code, out)
	}
	folder := filepath.Join(t.TempDir(), "gpt2")
	if out, code := run("export", "--format", "gpt2", run1, folder); code != 0 || !strings.Contains(out, "wrote "+folder) {
		t.Fatalf("export: exit %d\n%s", code, out)
	}
	if cfg, err := hf.ReadConfig(folder); err != nil || cfg.ModelType != "gpt2" {
		t.Fatalf("exported config %+v, %v", cfg, err)
	}
	if out, code := run(append(tiny, "--out", t.TempDir(), "--init-from", folder)...); code != 0 {
		t.Fatalf("train --init-from the export: exit %d\n%s", code, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"export", "--format", "bert", run1, t.TempDir()}, `--format "bert": accepted are gpt2, llama`},
		{[]string{"export", "--format", "llama", run1, t.TempDir()}, "a gpt exports in the gpt2 layout"},
		{[]string{"export", t.TempDir(), t.TempDir()}, "export: no checkpoint in"},
	} {
		out, code := run(c.args...)
		if code == 0 || !strings.Contains(out, c.want) || strings.Count(strings.TrimSpace(out), "\n") > 0 {
			t.Errorf("%v: exit %d, %q; want one line containing %q", c.args, code, out, c.want)
		}
	}
}
