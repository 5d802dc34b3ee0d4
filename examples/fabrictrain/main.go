// Command fabric trains the reference MLP under bf16-mixed precision with
// the Fabric API, on a synthetic task: classify x by the argmax of a fixed
// random linear teacher. Each step is the training step weft train runs:
// input cast, forward in the precision's scope, loss, backward through the
// loss scaler, optimizer step.
package main

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"

	"github.com/weftml/weft/data"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/tensor"
)

// B = batch size, D = 32 input features, K = 10 classes.
const B, D, K = 64, 32, 10

func main() {
	model := models.NewMLP(nn.NewInit(1337))
	rng := rand.New(rand.NewPCG(1337, 0))
	opt, err := optim.NewAdamW(nn.Parameters(model), optim.AdamWConfig{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	check(err)
	p, err := precision.Parse("bf16-mixed", precision.Options{})
	check(err)
	f := fabric.New(p)
	check(f.Setup(model, opt))
	teacher := randn(rng, D*K) // (D, K)

	for step := range 100 {
		res, err := f.TrainStep(context.Background(), model, synthetic(rng, teacher))
		check(err)
		if step%10 == 0 || step == 99 {
			fmt.Printf("step %3d  loss %.4f\n", step, res.Loss)
		}
	}
}

// synthetic draws a batch x ~ N(0, 1) labelled argmax(x·teacher).
func synthetic(rng *rand.Rand, teacher []float32) data.Batch {
	x := randn(rng, B*D) // (B, D)
	y := make([]int, B)  // (B,)
	for i := range B {
		best := float32(0)
		for k := range K {
			var z float32
			for d := range D {
				z += x[i*D+d] * teacher[d*K+k]
			}
			if k == 0 || z > best {
				best, y[i] = z, k
			}
		}
	}
	return data.Batch{X: tensor.FromFloat32(x, B, D), Targets: y}
}

func randn(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
