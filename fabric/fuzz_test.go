package fabric_test

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/local"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/tensor"
)

// FuzzFabricAPI drives the Fabric's public API in random orders with
// random arguments (nil, zero and wrong-shaped batches, nil models and
// optimizers, Setup twice, Backward or Step before Setup, ...): each pair
// of bytes is one call and its argument. Any panic fails; so does an error
// that names a Go type, which a user could not act on.
func FuzzFabricAPI(f *testing.F) {
	for _, seed := range [][]byte{
		{1, 0x11, 4, 0x41},                                 // Setup(mlp, adamw), TrainStep(mlp, a good batch)
		{1, 0x11, 4, 0x42, 4, 0x40},                        // a batch too narrow for fc1, an empty batch
		{6, 0, 1, 0, 1, 0x11, 6, 1},                        // Backward(nil), Setup(nil, nil), Setup(mlp, adamw), Backward
		{1, 0x11, 1, 0x11, 4, 0x01},                        // Setup twice, TrainStep(nil, ...)
		{1, 0x01, 7, 0, 8, 16},                             // Setup(mlp, nil), Step, ClipGradNorm
		{0, 3, 1, 0x33, 4, 0xc5, 5, 0xc6, 4, 0xc7},         // a gpt in fp8: good, too long and out-of-vocab batches
		{0, 4, 1, 0x33, 4, 0xc5, 11, 0, 12, 0, 12, 1},      // nf4: train, inspect, save, load
		{13, 4, 2, 2, 3, 0x20, 4, 0x8a, 4, 0x8b, 14, 0x0b}, // ddp on one rank: a cnn, good and wrong images
		{10, 0x07, 6, 1, 7, 0, 15, 3, 15, 9},               // Forward, Backward, Step before Setup; collectives
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		h := &apiHarness{t: t, f: newFabric(t, fabric.Config{})}
		for i := 0; i+1 < len(ops) && i < 32; i += 2 {
			h.call(ops[i], ops[i+1])
		}
	})
}

// apiHarness is one fuzz execution's fabric and the values it calls it with.
type apiHarness struct {
	t      *testing.T
	f      *fabric.Fabric
	cfg    fabric.Config   // f's
	models [4]models.Model // nil, mlp, cnn, gpt: built on first use
	last   *autograd.Var   // the last Forward's output
	dir    string
}

// fuzzSpecs are the precisions a fuzzed fabric trains in (index 0: New(nil)).
var fuzzSpecs = []string{"", "bf16-mixed", "16-mixed", "fp8", "bf16-true+nf4-dq", "int8-training", "transformer-engine", "fp8-current"}

func (h *apiHarness) call(op, arg byte) {
	ctx := context.Background()
	var err error
	switch op % 16 {
	case 0:
		err = h.renew(h.precision(arg))
	case 1:
		err = h.f.Setup(h.model(arg), h.optimizer(arg>>4))
	case 2:
		err = h.f.SetupModule(h.model(arg))
	case 3:
		err = h.f.SetupOptimizers(h.optimizer(arg >> 4))
	case 4:
		_, err = h.f.TrainStep(ctx, h.model(arg>>6), fuzzBatch(arg))
	case 5:
		_, err = h.f.EvalLoss(ctx, h.model(arg>>6), fuzzBatch(arg))
	case 6:
		err = h.f.Backward(h.loss(arg))
	case 7:
		_, err = h.f.Step()
	case 8:
		_, err = h.f.ClipGradNorm(float64(arg) / 16)
	case 9:
		err = h.f.ClipGradValue(float64(arg) / 16)
	case 10:
		h.last, err = h.f.Forward(h.forward(arg))
	case 11:
		err = h.inspect()
	case 12:
		err = h.checkpoint(ctx, arg)
	case 13:
		err = h.renew(h.configure(arg))
	case 14:
		_, err = h.f.FirstNonFinite(h.forward(arg))
	case 15:
		err = h.collective(ctx, arg)
	}
	if err != nil && goType.MatchString(err.Error()) {
		h.t.Errorf("call %d(%d): an error that names a Go type: %v", op%16, arg, err)
	}
}

// goType matches a Go type name in an error ("*optim.SGD", "models.CNN").
var goType = regexp.MustCompile(`\b[a-z][a-z0-9]*\.[A-Z]\w*`)

// renew replaces the fabric by one made from cfg, if New accepts it.
func (h *apiHarness) renew(cfg fabric.Config) error {
	f, err := fabric.New(cfg)
	if err != nil {
		return err
	}
	h.f, h.cfg = f, cfg
	return nil
}

// precision is the fabric's settings with a precision of fuzzSpecs.
func (h *apiHarness) precision(arg byte) fabric.Config {
	cfg := h.cfg
	cfg.Precision, cfg.Policy = nil, precision.Policy{}
	spec := fuzzSpecs[int(arg)%len(fuzzSpecs)]
	switch {
	case spec == "" && arg&0x80 != 0:
		cfg.Policy.Rules = []precision.Rule{} // a zero Policy, set
	case spec != "":
		p, err := precision.Parse(spec, precision.Options{})
		if err != nil {
			h.t.Fatal(err)
		}
		cfg.Precision = p
	}
	return cfg
}

// model is nil, an mlp, a cnn or a tiny gpt (each built once).
func (h *apiHarness) model(arg byte) models.Model {
	i := int(arg) % len(h.models)
	if h.models[i] == nil {
		init := nn.NewInit(1)
		switch i {
		case 1:
			h.models[i] = models.NewMLP(init)
		case 2:
			h.models[i] = models.NewCNN(init)
		case 3:
			h.models[i] = models.NewGPT(init, fuzzGPT)
		}
	}
	if h.models[i] == nil {
		return nil // an untyped nil, as a user's nil reads
	}
	return h.models[i]
}

var fuzzGPT = models.GPTConfig{Vocab: 16, Context: 4, Width: 16, Heads: 2, Layers: 1}

// optimizer is nil, AdamW or SGD over one of the models' parameters (not
// necessarily the model being set up).
func (h *apiHarness) optimizer(arg byte) optim.Optimizer {
	m := h.model(arg)
	if m == nil {
		return nil
	}
	if arg&4 != 0 {
		return optim.NewSGD(nn.Parameters(m), 0.1)
	}
	opt, err := optim.NewAdamW(nn.Parameters(m), optim.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95})
	if err != nil {
		h.t.Fatal(err)
	}
	return opt
}

// fuzzBatch is one of the batches a user could pass: good ones for each
// model and broken ones (empty, too narrow, too long, out of range, shape
// and tokens that disagree, targets of another length).
func fuzzBatch(arg byte) data.Batch {
	seq := func(n, mod int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = i % mod
		}
		return out
	}
	switch arg % 16 {
	case 1:
		return data.Batch{X: full(0.5, 2, 32), Targets: []int{1, 2}}
	case 2:
		return data.Batch{X: full(0.5, 2, 16), Targets: []int{1, 2}} // narrower than fc1's 32
	case 3:
		return data.Batch{X: full(0.5, 2, 32), Targets: []int{1, 2, 3}}
	case 4:
		return data.Batch{X: full(0.5, 2, 32), Targets: []int{1, 99}}
	case 5:
		return data.Batch{Tokens: seq(8, 16), Shape: []int{2, 4}, Targets: seq(8, 16)}
	case 6:
		return data.Batch{Tokens: seq(16, 16), Shape: []int{2, 8}, Targets: seq(16, 16)} // longer than the context
	case 7:
		return data.Batch{Tokens: append(seq(7, 16), 40), Shape: []int{2, 4}, Targets: seq(8, 16)} // ids past the vocabulary
	case 8:
		return data.Batch{Tokens: seq(6, 16), Shape: []int{2, 4}, Targets: seq(8, 16)}
	case 9:
		return data.Batch{Tokens: seq(8, 16), Shape: []int{8}, Targets: seq(8, 16)}
	case 10:
		return data.Batch{X: full(0.5, 2, 1, 12, 12), Targets: []int{1, 2}}
	case 11:
		return data.Batch{X: full(0.5, 2, 3, 12, 12), Targets: []int{1, 2}}
	case 12:
		return data.Batch{X: full(0.5, 64), Targets: []int{1, 2}}
	case 13:
		return data.Batch{X: full(float32(math.NaN()), 2, 32), Targets: []int{1, 2}}
	case 14:
		return data.Batch{X: full(0.5, 2, 32).To(dtype.F16), Targets: []int{1, 2}}
	case 15:
		return data.Batch{Tokens: seq(8, 16), Shape: []int{-2, -4}, Targets: seq(8, 16)}
	}
	return data.Batch{}
}

// full is a float32 tensor of shape filled with v.
func full(v float32, shape ...int) *tensor.Tensor {
	t := tensor.New(dtype.F32, shape...)
	t.Fill(float64(v))
	return t
}

// loss is nil, the last forward's output, a Var without a value, or a
// Var that no forward recorded.
func (h *apiHarness) loss(arg byte) *autograd.Var {
	switch arg % 4 {
	case 1:
		return h.last
	case 2:
		return &autograd.Var{}
	case 3:
		return &autograd.Var{Value: full(1, 1)}
	}
	return nil
}

// forward is nil, a function that returns nothing, one that fails, or the
// mean of a model's logits on a batch.
func (h *apiHarness) forward(arg byte) func(*autograd.Tape) (*autograd.Var, error) {
	switch arg % 4 {
	case 1:
		return func(*autograd.Tape) (*autograd.Var, error) { return nil, nil }
	case 2:
		return func(*autograd.Tape) (*autograd.Var, error) { return nil, errors.New("the user's forward failed") }
	case 3:
		m, b := h.model(arg>>2), fuzzBatch(arg>>4)
		if m == nil {
			return nil
		}
		return func(tp *autograd.Tape) (*autograd.Var, error) {
			out, err := m.Forward(tp, b)
			if err != nil {
				return nil, err
			}
			return tp.CrossEntropy(out, b.Targets)
		}
	}
	return nil
}

// inspect calls every getter: none may fail before Setup.
func (h *apiHarness) inspect() error {
	h.f.States()
	h.f.NonFiniteParams()
	h.f.LossScale()
	h.f.Resolution()
	h.f.Layout()
	h.f.Precision()
	h.f.NonFinite()
	h.f.Input(nil)
	h.f.Input(full(1, 2, 2))
	return h.f.Gather()
}

// checkpoint saves or loads the fabric's checkpoint.
func (h *apiHarness) checkpoint(ctx context.Context, arg byte) error {
	if h.dir == "" {
		h.dir = h.t.TempDir()
	}
	dir := filepath.Join(h.dir, "ckpt")
	if arg%2 == 0 {
		return h.f.Save(ctx, dir, fabric.SaveOptions{})
	}
	_, err := h.f.Load(dir, fabric.LoadOptions{})
	return err
}

// configure is the fabric's settings with one a user sets changed, to a
// value in or out of range: a strategy over one rank, or over no
// communicator, among them.
func (h *apiHarness) configure(arg byte) fabric.Config {
	cfg := h.cfg
	switch arg % 8 {
	case 0:
		cfg.Accumulation.MicroBatches = int(arg>>3) - 8
	case 1:
		cfg.ClipValue = float64(arg>>3) - 8
	case 2:
		cfg.OnNonFinite = fabric.OnNonFinite(arg >> 3)
	case 3:
		cfg.ActivationCheckpointing = []string{"blocks.*", "[", ""}[int(arg>>3)%3:]
	case 4:
		cfg.Strategy = []string{"ddp", "fsdp", "zero1", "single", "zero9"}[int(arg>>3)%5]
		cfg.Comm = local.NewGroup(1, local.Options{})[0]
	case 5:
		cfg.Strategy, cfg.Comm = "ddp", nil
	case 6:
		cfg.Accumulation.Sync = fabric.GradSync(arg>>3) - 8
	case 7:
		cfg.Loggers, cfg.Callbacks = []fabric.Logger{nil}[:int(arg>>3)%2], []any{nil}[:int(arg>>4)%2]
	}
	return cfg
}

// collective runs one of the fabric's collectives on nil or a tensor.
func (h *apiHarness) collective(ctx context.Context, arg byte) error {
	var t *tensor.Tensor
	if arg&1 != 0 {
		t = full(1, 4)
	}
	var err error
	switch (arg >> 1) % 4 {
	case 0:
		_, err = h.f.AllGather(ctx, t)
	case 1:
		_, err = h.f.AllReduce(ctx, t, fabric.Sum)
	case 2:
		_, err = h.f.Broadcast(ctx, t, int(arg>>3)-1)
	case 3:
		err = h.f.NoBackwardSync(arg&8 != 0, nil)
	}
	return err
}

// TestMisuseIsAnError: each misuse of the API that once panicked, or
// blamed another call, is an error that names what was wrong.
func TestMisuseIsAnError(t *testing.T) {
	ctx := context.Background()
	setUp := func(t *testing.T) (*fabric.Fabric, *models.MLP) { return mlpFabric(t, 1, "32-true", "", nil) }
	fresh := func() (*fabric.Fabric, *models.MLP, optim.Optimizer) {
		m := models.NewMLP(nn.NewInit(1))
		opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
		if err != nil {
			t.Fatal(err)
		}
		return newFabric(t, fabric.Config{}), m, opt
	}
	for _, tt := range []struct {
		name string
		call func(t *testing.T) error
		want string
	}{
		{"a batch too narrow", func(t *testing.T) error {
			f, m := setUp(t)
			_, err := f.TrainStep(ctx, m, data.Batch{X: full(1, 4, 16), Targets: []int{0, 1, 2, 3}})
			return err
		}, "mlp: fc1 takes X of shape [B 32]; the batch's X is [4 16]"},
		{"an empty batch", func(t *testing.T) error {
			f, m := setUp(t)
			_, err := f.TrainStep(ctx, m, data.Batch{})
			return err
		}, "fabric: TrainStep: the batch is empty"},
		{"Setup(nil, nil)", func(*testing.T) error { return newFabric(t, fabric.Config{}).Setup(nil, nil) }, "the optimizer is nil"},
		{"Setup(nil, opt)", func(*testing.T) error {
			f, _, opt := fresh()
			return f.Setup(nil, opt)
		}, "the model is nil"},
		{"Setup(m, nil)", func(*testing.T) error {
			f, m, _ := fresh()
			return f.Setup(m, nil)
		}, "the optimizer is nil"},
		{"Setup twice", func(*testing.T) error {
			f, m, opt := fresh()
			if err := f.Setup(m, opt); err != nil {
				return err
			}
			return f.Setup(m, opt)
		}, "Setup called twice"},
		{"Backward(nil)", func(t *testing.T) error {
			f, _ := setUp(t)
			return f.Backward(nil)
		}, "the loss is nil"},
		{"Backward before Setup", func(*testing.T) error {
			return newFabric(t, fabric.Config{}).Backward(&autograd.Var{Value: full(1, 1)})
		}, "Backward before Setup"},
		{"Step before Setup", func(*testing.T) error { _, err := newFabric(t, fabric.Config{}).Step(); return err }, "Step before Setup"},
		{"another model", func(t *testing.T) error {
			f, _ := setUp(t)
			_, err := f.TrainStep(ctx, models.NewMLP(nn.NewInit(2)), mlpBatch(0))
			return err
		}, "a model other than the one given to Setup"},
		{"a strategy for one device on two", func(t *testing.T) error {
			_, err := fabric.New(fabric.Config{Strategy: "single", Comm: local.NewGroup(2, local.Options{})[0]})
			return err
		}, "strategy single runs on one device, not 2"},
		{"a strategy that is not", func(t *testing.T) error {
			_, err := fabric.New(fabric.Config{Strategy: "zero9"})
			return err
		}, `fabric: unknown strategy "zero9"`},
		{"a mesh without its plan", func(t *testing.T) error {
			c := local.NewGroup(1, local.Options{})[0]
			_, err := fabric.New(fabric.Config{Comm: c, Mesh: &comm.Mesh{DP: 1, TP: 1, Data: c, Tensor: c}})
			return err
		}, "a Mesh needs a TensorPlan"},
		{"Precision and Policy", func(t *testing.T) error {
			pol, _, err := precision.ParsePolicy("bf16-mixed", nil, "auto", precision.Options{})
			if err != nil {
				return err
			}
			_, err = fabric.New(fabric.Config{Precision: &noRoles{}, Policy: pol})
			return err
		}, "both Precision and Policy are set"},
		{"micro-batches below 0", func(t *testing.T) error {
			_, err := fabric.New(fabric.Config{Accumulation: fabric.Accumulation{MicroBatches: -1}})
			return err
		}, "fabric: -1 micro-batches"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(t)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
