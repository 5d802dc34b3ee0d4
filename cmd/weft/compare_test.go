package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompareDrawsBesideTheRuns: without --png the plot goes to the runs'
// parent folder, never the working directory.
func TestCompareDrawsBesideTheRuns(t *testing.T) {
	parent := t.TempDir()
	for i, name := range []string{"a", "b"} {
		dir := filepath.Join(parent, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		var lines strings.Builder
		for step := range 20 {
			fmt.Fprintf(&lines, `{"step":%d,"loss":%g,"loss_scale":1,"tokens_per_s":1,"val_loss":%g,"peak_alloc_mib":1,"lr":0.001}`+"\n",
				step, 3-0.1*float64(step)-float64(i), 3.5-0.1*float64(step))
		}
		if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(lines.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(t.TempDir())
	out, code := run("compare", filepath.Join(parent, "a"), filepath.Join(parent, "b"))
	want := filepath.Join(parent, "compare.png")
	if code != 0 || !strings.Contains(out, "plot "+want) {
		t.Fatalf("exit %d:\n%s\nwant the plot at %s", code, out, want)
	}
	if _, err := os.Stat(want); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("compare.png"); err == nil {
		t.Error("compare wrote compare.png into the working directory")
	}
}
