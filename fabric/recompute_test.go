package fabric_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
)

// tokenBatch is a random gpt batch of b sequences of t tokens.
func tokenBatch(seed uint64, b, t, vocab int) data.Batch {
	rng := rand.New(rand.NewPCG(seed, 9))
	ids := make([]int, b*t)
	for i := range ids {
		ids[i] = rng.IntN(vocab)
	}
	return data.Batch{Tokens: ids, Shape: []int{b, t}, Targets: ids}
}

// trained is what steps of TrainStep left: each loss and the final
// parameters' bytes.
type trained struct {
	losses []float64
	params [][]byte
}

// setUp returns the fabric of pol set up for m with AdamW, checkpointing
// the modules patterns name, the optimizer and Setup's error.
func setUp(t *testing.T, m nn.Module, pol precision.Policy, patterns []string) (*fabric.Fabric, *optim.AdamW, error) {
	t.Helper()
	opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
	if err != nil {
		t.Fatal(err)
	}
	f, err := fabric.New(fabric.Config{Policy: pol, ActivationCheckpointing: patterns})
	if err != nil {
		t.Fatal(err)
	}
	return f, opt, f.Setup(m, opt)
}

// policy is the policy of spec with per-module rules.
func policy(t *testing.T, spec string, rules ...string) precision.Policy {
	t.Helper()
	pol, _, err := precision.ParsePolicy(spec, rules, "auto", precision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// trainCheckpointed trains a fresh reference gpt for four steps under the
// policy, checkpointing the modules patterns name.
func trainCheckpointed(t *testing.T, pol precision.Policy, patterns []string) trained {
	t.Helper()
	m, err := models.New("gpt", 5)
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := setUp(t, m, pol, patterns)
	if err != nil {
		t.Fatal(err)
	}
	var out trained
	for s := range 4 {
		res, err := f.TrainStep(context.Background(), m, tokenBatch(uint64(s), 4, 16, 48))
		if err != nil {
			t.Fatal(err)
		}
		out.losses = append(out.losses, res.Loss)
	}
	for _, p := range nn.Parameters(m) {
		out.params = append(out.params, bytes.Clone(p.Var.Value.Data()))
	}
	return out
}

// TestActivationCheckpointingIsExact: training with every checkpointable
// unit recomputed in backward follows the trajectory of training without,
// bit for bit, losses and final weights, in every kind of precision: plain,
// autocast, float16 with its loss scaler, FP8 delayed scaling (whose amax
// histories the recompute must not touch), quantized weights, and a
// per-module policy.
func TestActivationCheckpointingIsExact(t *testing.T) {
	for _, c := range []struct {
		spec     string
		rules    []string
		patterns []string
	}{
		{"32-true", nil, []string{"blocks.*"}},
		{"64-true", nil, []string{"blocks.*"}},
		{"bf16-mixed", nil, []string{"blocks.*"}},
		{"16-mixed", nil, []string{"blocks.*"}},
		{"bf16-true", nil, []string{"blocks.*"}},
		{"bf16-mixed+fp8", nil, []string{"blocks.*"}},
		{"transformer-engine", nil, []string{"kind:Block"}},
		{"16-mixed+fp8-mx", nil, []string{"blocks.1"}},
		{"bf16-true+nf4-dq", nil, []string{"blocks.*"}},
		{"32-true", []string{"blocks.1=bf16-mixed+fp8"}, []string{"blocks.*"}},
	} {
		t.Run(strings.Join(append([]string{c.spec}, c.rules...), "/"), func(t *testing.T) {
			pol := policy(t, c.spec, c.rules...)
			plain, ckpt := trainCheckpointed(t, pol, nil), trainCheckpointed(t, pol, c.patterns)
			if !slices.Equal(plain.losses, ckpt.losses) {
				t.Errorf("losses %v without checkpointing, %v with", plain.losses, ckpt.losses)
			}
			for i := range plain.params {
				if !bytes.Equal(plain.params[i], ckpt.params[i]) {
					t.Errorf("parameter %d differs after training with checkpointing", i)
				}
			}
		})
	}
}

// retained is what the fabric's tape holds after a forward pass of the
// gpt with cfg over b in 32-true, checkpointing the modules patterns name.
func retained(t *testing.T, cfg models.GPTConfig, b data.Batch, patterns []string) (int, int64) {
	t.Helper()
	m := models.NewGPT(nn.NewInit(1), cfg)
	f, _, err := setUp(t, m, policy(t, "32-true"), patterns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Forward(func(tp *autograd.Tape) (*autograd.Var, error) { return m.Forward(tp, b) }); err != nil {
		t.Fatal(err)
	}
	defer f.Tape().Reset()
	return f.Tape().Retained()
}

// TestActivationCheckpointingFreesActivations: with every block of the
// reference gpt checkpointed, the tape holds after the forward what a gpt
// without blocks holds, plus each block's result (B, T, C) in float32:
// everything else the blocks computed is freed.
func TestActivationCheckpointingFreesActivations(t *testing.T) {
	cfg := models.ReferenceGPT
	b := tokenBatch(1, 8, cfg.Context, cfg.Vocab)
	n, bytes := retained(t, cfg, b, nil)
	nc, bytesc := retained(t, cfg, b, []string{"blocks.*"})
	none := cfg
	none.Layers = 0
	n0, bytes0 := retained(t, none, b, nil)
	blockOut := int64(8 * cfg.Context * cfg.Width * 4)
	if nc != n0+cfg.Layers || bytesc != bytes0+int64(cfg.Layers)*blockOut {
		t.Errorf("checkpointed: %d tensors, %d bytes; want the blockless gpt's %d + %d and %d + %d·%d", nc, bytesc, n0, cfg.Layers, bytes0, cfg.Layers, blockOut)
	}
	t.Logf("reference gpt, batch 8×%d, 32-true: %d tensors, %d bytes held after the forward; %d, %d with every block checkpointed (%.0f%% less)",
		cfg.Context, n, bytes, nc, bytesc, 100*(1-float64(bytesc)/float64(bytes)))
}

// TestActivationCheckpointingMatchesNothing: a pattern that names no
// module fails Setup, naming the nearest paths.
func TestActivationCheckpointingMatchesNothing(t *testing.T) {
	m := models.NewGPT(nn.NewInit(1), models.ReferenceGPT)
	_, _, err := setUp(t, m, policy(t, "32-true"), []string{"blocks.*", "block.*"})
	want := `fabric: activation checkpointing "block.*": matches no module; nearest: tok, blocks.0, blocks.1`
	if err == nil || err.Error() != want {
		t.Errorf("Setup: %v, want %s", err, want)
	}
}
