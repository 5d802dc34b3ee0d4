package train

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// textFolder copies a few standard-library sources into a new folder as
// text files, nested: a user's own text.
func textFolder(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for i, f := range []string{"strings/strings.go", "bytes/buffer.go", "sort/sort.go"} {
		b, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "src", f))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, []string{"a", "b/c", "d"}[i], filepath.Base(f)+".txt")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestDataDistributedMatchesOneDevice: on --data text, two ddp ranks each
// taking their share of the global batch train the losses one device
// does (in float64, to rounding), validation included.
func TestDataDistributedMatchesOneDevice(t *testing.T) {
	text := textFolder(t)
	config := func(strategy string, devices int) Config {
		c := tinyConfig(t, "64-true")
		c.Data, c.Strategy, c.Devices, c.Steps = text, strategy, devices, 8
		return c
	}
	one, two := config("single", 1), config("ddp", 2)
	for _, c := range []Config{one, two} {
		if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := readMetrics(filepath.Join(one.Out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := readMetrics(filepath.Join(two.Out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(b) {
		t.Fatalf("%d steps on one device, %d on two", len(a), len(b))
	}
	close := func(x, y Float) bool { return math.Abs(float64(x-y)) <= 1e-12*math.Abs(float64(x)) }
	for i := range a {
		if !close(a[i].Loss, b[i].Loss) || (a[i].ValLoss == nil) != (b[i].ValLoss == nil) || a[i].ValLoss != nil && !close(*a[i].ValLoss, *b[i].ValLoss) {
			t.Fatalf("step %d: one device loss %v val %v, two ranks %v val %v", i, a[i].Loss, a[i].ValLoss, b[i].Loss, b[i].ValLoss)
		}
	}
	if a[0].Loss == a[len(a)-1].Loss {
		t.Error("the loss did not move")
	}
}
