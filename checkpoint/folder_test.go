package checkpoint

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/dtype"
)

// FuzzParseManifest: a manifest from an untrusted checkpoint is checked,
// never trusted into a panic.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"format":"weft-checkpoint/2","step":10,"config":{"model":"gpt"},"optimizer_steps":{"tok.weight":10},"precision":{"16-mixed":{"scale":65536}},"digests":{"state.safetensors":{"file":"ab","tensors":{}}}}`))
	f.Add([]byte(`{"format":"weft-checkpoint/2","step":-3}`))
	f.Add([]byte(`{"format":"other"}`))
	f.Add([]byte(`[1,2,3]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err == nil && (m.Step < 0 || m.FabricSteps < 0 || m.OptimizerShards < 0 || m.Format != Format || len(m.Digests) == 0) {
			t.Fatalf("accepted %+v", m)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("a multi-line error: %v", err)
		}
	})
}

// bytesOf is n float32 zeros with byte i set to i+1.
func bytesOf(n int) []byte {
	b := make([]byte, 4*n)
	for i := range b {
		b[i] = byte(i + 1)
	}
	return b
}

// writeFolder writes a checkpoint folder of parameter w (4 float32) whose
// AdamW moments are cut into two ranks' shards, and its manifest.
func writeFolder(t *testing.T) (string, *Manifest) {
	t.Helper()
	dir := t.TempDir()
	w := bytesOf(4)
	files := map[string][]Tensor{
		StateFile: {{Name: "model.w", DType: dtype.F32, Shape: []int{4}, Data: w}},
	}
	for r := range 2 { // each rank's 2 elements of each moment
		chunk := w[8*r : 8*r+8]
		files[ShardFile(r)] = []Tensor{
			{Name: "optim.w.exp_avg", DType: dtype.F32, Shape: []int{2}, Data: chunk},
			{Name: "optim.w.exp_avg_sq", DType: dtype.F32, Shape: []int{2}, Data: chunk},
		}
	}
	m := &Manifest{Format: Format, Step: 3, OptimizerSteps: map[string]int{"w": 3}, OptimizerShards: 2, Digests: map[string]Digest{}}
	for name, ts := range files {
		path := filepath.Join(dir, name)
		if err := WriteSafetensors(path, ts, nil); err != nil {
			t.Fatal(err)
		}
		d, err := DigestSafetensors(path)
		if err != nil {
			t.Fatal(err)
		}
		m.Digests[name] = d
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, m
}

// TestOpenVerified: a file as the manifest records it opens; one with a
// changed tensor is refused naming the tensor, a missing one naming the
// file.
func TestOpenVerified(t *testing.T) {
	dir, _ := writeFolder(t)
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenVerified(dir, m, StateFile); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, ShardFile(1))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff // the last tensor's last byte
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = OpenVerified(dir, m, ShardFile(1))
	if err == nil || !strings.Contains(err.Error(), "tensor optim.w.exp_avg_sq of optim-rank-001.safetensors does not match its SHA-256") {
		t.Errorf("a changed tensor: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenVerified(dir, m, ShardFile(1)); err == nil || !strings.Contains(err.Error(), "optim-rank-001.safetensors is missing") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestConsolidateJoinsShards: Consolidate writes the parameters and each
// moment whole, the ranks' chunks joined in rank order.
func TestConsolidateJoinsShards(t *testing.T) {
	dir, _ := writeFolder(t)
	out := filepath.Join(t.TempDir(), "model.safetensors")
	if err := Consolidate(dir, out); err != nil {
		t.Fatal(err)
	}
	f, err := ReadSafetensors(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"model.w", "optim.w.exp_avg", "optim.w.exp_avg_sq"}; !slices.Equal(f.Names(), want) {
		t.Fatalf("tensors %v, want %v", f.Names(), want)
	}
	for _, name := range f.Names() {
		if got, _ := f.Tensor(name); !bytes.Equal(got.Data, bytesOf(4)) || !slices.Equal(got.Shape, []int{4}) {
			t.Errorf("%s: %v %v, want the whole parameter's bytes", name, got.Shape, got.Data)
		}
	}
	if f.Metadata["format"] != Format || f.Metadata["step"] != "3" {
		t.Errorf("metadata %v", f.Metadata)
	}
}
