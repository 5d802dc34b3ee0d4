package fabric_test

import (
	"bytes"
	"testing"

	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// TestSetupMaterializesMeta: a model built on shapes alone (nn.Meta) and
// set up on one device holds after Setup the values the same build with
// nn.NewInit holds after Setup — parameters cast and weights quantized
// alike, bit for bit — and Setup never holds more than the converted
// model plus one float32 weight: the float model never exists whole.
func TestSetupMaterializesMeta(t *testing.T) {
	cfg := models.GPTConfig{Vocab: 64, Context: 16, Width: 64, Heads: 2, Layers: 3}
	for _, spec := range []string{"32-true", "bf16-true", "bf16-true+nf4-dq", "16-true+fp4", "int8", "bf16-mixed+nf4"} {
		t.Run(spec, func(t *testing.T) {
			real := models.NewGPT(nn.NewInit(7), cfg)
			if _, _, err := setUp(t, real, policy(t, spec), nil); err != nil {
				t.Fatal(err)
			}
			meta := models.NewGPT(nn.Meta(7), cfg)
			before := tensor.Memory().Live
			tensor.ResetPeak()
			if _, _, err := setUp(t, meta, policy(t, spec), nil); err != nil {
				t.Fatal(err)
			}
			after := tensor.Memory()
			largest := 4 * cfg.Width * cfg.Width // an MLP weight
			if got, bound := after.Peak-before, after.Live-before+tensor.ScratchBytes(largest); got > bound {
				t.Errorf("Setup of the meta model peaked %d bytes over its start, want at most the converted model's %d + one float32 weight: %d", got, after.Live-before, bound)
			}
			want, got := values(real), values(meta)
			if len(want) != len(got) {
				t.Fatalf("%d tensors from the meta build, %d from the real one", len(got), len(want))
			}
			for name, w := range want {
				if !bytes.Equal(got[name], w) {
					t.Errorf("%s differs between the meta and the real build", name)
				}
			}
		})
	}
}

// values is every parameter's and frozen weight's storage in m, by name.
func values(m nn.Module) map[string][]byte {
	out := map[string][]byte{}
	for _, p := range nn.Parameters(m) {
		out[p.Path] = p.Var.Value.Data()
	}
	nn.Walk(m, func(path string, mod nn.Module) {
		for _, fz := range nn.FrozenOf(mod) {
			out[path+"."+fz.Name] = (*fz.Value).Data()
		}
	})
	return out
}
