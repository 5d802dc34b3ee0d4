// Package torchoracle runs the PyTorch oracles of testdata/hf (plain-torch
// forward passes of HF's layouts) for tests, and reads and writes the
// safetensors files they exchange. Tests skip when PyTorch is missing.
package torchoracle

import (
	"encoding/binary"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// Python is Debian's interpreter, the one python3-torch installs into.
const Python = "/usr/bin/python3"

// Tol is the agreement asked of float32 logits: max|weft − torch| over
// max|torch| (Normwise), at most 1e-5.
const Tol = 1e-5

// Need skips the test when PyTorch is not importable by Python.
func Need(t testing.TB) {
	t.Helper()
	if err := exec.Command(Python, "-c", "import torch").Run(); err != nil {
		t.Skipf("PyTorch is not importable by %s (%v): apt-get install python3-torch to run the oracle", Python, err)
	}
}

// Run runs script (a path) with args, failing the test with its output if
// it fails.
func Run(t testing.TB, script string, args ...string) {
	t.Helper()
	out, err := exec.Command(Python, append([]string{script}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(script), strings.Join(args, " "), err, out)
	}
}

// WriteTokens writes b's tokens as the oracles read them (int64 [B, T]) to
// dir/tokens.safetensors and returns its path.
func WriteTokens(t testing.TB, dir string, b data.Batch) string {
	t.Helper()
	raw := make([]byte, 8*len(b.Tokens))
	for i, id := range b.Tokens {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(id))
	}
	path := filepath.Join(dir, "tokens.safetensors")
	if err := checkpoint.WriteSafetensors(path, []checkpoint.Tensor{{Name: "tokens", DType: dtype.I64, Shape: b.Shape, Data: raw}}, nil); err != nil {
		t.Fatal(err)
	}
	return path
}

// Read reads an oracle's output: the tokens as a batch and the logits.
func Read(t testing.TB, path string) (data.Batch, []float64) {
	t.Helper()
	f, err := checkpoint.ReadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	tok, ok1 := f.Tensor("tokens")
	logits, ok2 := f.Tensor("logits")
	if !ok1 || !ok2 {
		t.Fatalf("%s lacks tokens or logits", path)
	}
	ids, err := tensor.FromBytes(tok.DType, tok.Data, tok.Shape...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tensor.FromBytes(logits.DType, logits.Data, logits.Shape...)
	if err != nil {
		t.Fatal(err)
	}
	return data.Batch{Tokens: ids.Ints(), Shape: tok.Shape}, l.Float64s()
}

// Normwise returns max|a−b| / max|b|, a normwise relative error
// (elementwise ratios would blow up at logits near zero); +Inf when the
// lengths differ.
func Normwise(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d, m float64
	for i := range b {
		d, m = max(d, math.Abs(a[i]-b[i])), max(m, math.Abs(b[i]))
	}
	return d / m
}
