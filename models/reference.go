package models

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// DefaultReferenceDir is the repository's copy of the PyTorch reference data,
// relative to the module root.
const DefaultReferenceDir = "testdata/reference"

// ReferenceDir returns $WEFT_REFERENCE_DIR if set, else dir.
func ReferenceDir(dir string) string {
	if env := os.Getenv("WEFT_REFERENCE_DIR"); env != "" {
		return env
	}
	return dir
}

// Reference is refs.safetensors: each model's initial weights, data and
// float64 results, as produced by PyTorch.
type Reference struct {
	file *checkpoint.File
}

// LoadReference reads dir/refs.safetensors.
func LoadReference(dir string) (*Reference, error) {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("reference folder %s not found (set WEFT_REFERENCE_DIR or --refs)", dir)
	}
	f, err := checkpoint.ReadSafetensors(filepath.Join(dir, "refs.safetensors"))
	if err != nil {
		return nil, err
	}
	return &Reference{file: f}, nil
}

// Tensor returns the reference tensor called name.
func (r *Reference) Tensor(name string) (*tensor.Tensor, error) {
	t, ok := r.file.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("reference tensor %q is missing", name)
	}
	return tensor.FromBytes(t.DType, t.Data, t.Shape...)
}

// LoadInit copies the model's initial weights (<model>.init.<param>) into m.
func (r *Reference) LoadInit(model string, m nn.Module) error {
	return nn.Load(m, func(path string) (*tensor.Tensor, error) { return r.Tensor(model + ".init." + path) })
}

// Final64 returns the model's parameters after the pure float64 run.
func (r *Reference) Final64(model, path string) (*tensor.Tensor, error) {
	return r.Tensor(model + ".final64." + path)
}

// Batch returns the batch of step s (0-based) of the reference schedule.
func (r *Reference) Batch(model string, s int) (data.Batch, error) {
	switch model {
	case "mlp", "cnn":
		rows := map[string]int{"mlp": 64, "cnn": 32}[model]
		x, err := r.Tensor(model + ".x")
		if err != nil {
			return data.Batch{}, err
		}
		y, err := r.Tensor(model + ".y")
		if err != nil {
			return data.Batch{}, err
		}
		n := x.Dim(0)
		start := (rows * s) % n
		if start+rows > n {
			return data.Batch{}, fmt.Errorf("reference %s: batch of step %d runs past %d rows", model, s, n)
		}
		return data.Batch{X: tensor.SliceRows(x, start, rows), Targets: y.Ints()[start : start+rows]}, nil
	case "gpt":
		tok, err := r.Tensor("gpt.tokens")
		if err != nil {
			return data.Batch{}, err
		}
		ids := tok.Ints()
		const seqs, t = 8, 16
		b := data.Batch{Shape: []int{seqs, t}}
		for j := range seqs {
			o := (131*s + 509*j) % (len(ids) - t - 1)
			b.Tokens = append(b.Tokens, ids[o:o+t]...)
			b.Targets = append(b.Targets, ids[o+1:o+t+1]...)
		}
		return b, nil
	}
	return data.Batch{}, fmt.Errorf("no reference data schedule for model %q", model)
}
