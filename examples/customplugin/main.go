// Command customplugin registers a precision plugin of its own, which runs
// layer_norm in float64, and trains the reference gpt with it on the
// LayerNorms and bf16-mixed everywhere else, chosen by spec strings as
// weft train's --precision and --precision-for take them.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
)

// f64Norm holds one role, compute: layer_norm's inputs are cast to float64,
// every other op runs in its inputs' dtype. Compute is an exclusive role,
// so it meets bf16-mixed's autocast through a rule, which gives the
// LayerNorms a scope of their own, not through "+".
type f64Norm struct{}

func (f64Norm) Name() string { return "f64-layernorm" }

func (f64Norm) CastInput(op autograd.Op, in dtype.DType) dtype.DType {
	if op == autograd.OpLayerNorm {
		return dtype.F64
	}
	return in
}

// Registering at init makes the name a spec before any flag is read.
func init() {
	if err := precision.Register("f64-layernorm", func() precision.Plugin { return f64Norm{} }); err != nil {
		panic(err)
	}
}

func main() {
	spec := flag.String("precision", "bf16-mixed", "precision spec")
	rule := flag.String("precision-for", "kind:LayerNorm=f64-layernorm", "per-module precision 'GLOB=SPEC'")
	steps := flag.Int("steps", 20, "training steps")
	flag.Parse()
	if _, err := run(os.Stdout, *spec, *rule, *steps); err != nil {
		log.Fatal(err)
	}
}

// run trains steps steps under the precision spec and rule, printing and
// returning the losses.
func run(out io.Writer, spec, rule string, steps int) ([]float64, error) {
	pol, scaling, err := precision.ParsePolicy(spec, []string{rule}, "auto", precision.Options{})
	if err != nil {
		return nil, err
	}
	model := models.NewGPT(nn.NewInit(1337), models.ReferenceGPT)
	opt, err := optim.NewAdamW(nn.Parameters(model), optim.AdamWConfig{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
	if err != nil {
		return nil, err
	}
	f, err := fabric.New(fabric.Config{Policy: pol, LossScaling: scaling})
	if err != nil {
		return nil, err
	}
	if err := f.Setup(model, opt); err != nil {
		return nil, err
	}
	var losses []float64
	for step := range steps {
		res, err := f.TrainStep(context.Background(), model, counting(8, step))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "step %2d  loss %.4f\n", step, res.Loss)
		losses = append(losses, res.Loss)
	}
	return losses, nil
}

// counting is a batch of B rows of T tokens that count up modulo the
// vocabulary from a row's own start: each target is its token plus one.
func counting(B, step int) data.Batch {
	V, T := models.ReferenceGPT.Vocab, models.ReferenceGPT.Context
	tokens, targets := make([]int, B*T), make([]int, B*T) // (B, T)
	for i := range tokens {
		tokens[i] = (step*B + i/T*7 + i%T) % V
		targets[i] = (tokens[i] + 1) % V
	}
	return data.Batch{Tokens: tokens, Shape: []int{B, T}, Targets: targets}
}
