package fabric_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"

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

// sentence is the text the examples' gpt learns, as byte ids.
var sentence, _ = data.Encode(data.Bytes{}, strings.Repeat("the quick brown fox jumps over the lazy dog. ", 40))

// tinyGPT is a gpt of 2 layers, width 32, over bytes, in contexts of 16.
var tinyGPT = models.GPTConfig{Vocab: 256, Context: 16, Width: 32, Heads: 2, Layers: 2}

// newGPTFabric sets up a tinyGPT under spec with AdamW.
func newGPTFabric(spec string) (*fabric.Fabric, *models.GPT, error) {
	p, err := precision.Parse(spec, precision.Options{})
	if err != nil {
		return nil, nil, err
	}
	f, err := fabric.New(fabric.Config{Precision: p, Seed: 1})
	if err != nil {
		return nil, nil, err
	}
	model := models.NewGPT(f.InitModule(false), tinyGPT)
	opt, err := optim.NewAdamW(nn.Parameters(model), optim.AdamWConfig{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
	if err != nil {
		return nil, nil, err
	}
	return f, model, f.Setup(model, opt)
}

// trainOn trains steps [from, to) on global batches of 8 windows of 16
// bytes, batch i a pure function of i, and returns the losses.
func trainOn(f *fabric.Fabric, model *models.GPT, from, to int) ([]float64, error) {
	batches := data.NewTokenSampler(sentence, 8, 16, 1)
	batches.Seek(uint64(from))
	var losses []float64
	for range to - from {
		res, err := f.TrainStep(context.Background(), model, batches.Next())
		if err != nil {
			return nil, err
		}
		losses = append(losses, res.Loss)
	}
	return losses, nil
}

// A gpt learns a sentence in bf16-mixed with FP8 GEMMs: Setup converts its
// Linears, and TrainStep is the whole step (forward in the precision's
// scopes, loss, backward through the loss scaler, optimizer step).
func ExampleNew() {
	p, err := precision.Parse("bf16-mixed+fp8", precision.Options{})
	if err != nil {
		log.Fatal(err)
	}
	f, err := fabric.New(fabric.Config{Precision: p})
	if err != nil {
		log.Fatal(err)
	}
	model := models.NewGPT(f.InitModule(false), tinyGPT)
	opt, err := optim.NewAdamW(nn.Parameters(model), optim.AdamWConfig{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
	if err != nil {
		log.Fatal(err)
	}
	if err := f.Setup(model, opt); err != nil {
		log.Fatal(err)
	}
	batches := data.NewTokenSampler(sentence, 8, 16, 1)
	var first, last float64
	for step := range 40 {
		res, err := f.TrainStep(context.Background(), model, batches.Next())
		if err != nil {
			log.Fatal(err)
		}
		if step == 0 {
			first = res.Loss
		}
		last = res.Loss
	}
	fmt.Println("precision:", f.Precision().Name())
	fmt.Println("loss fell by more than half:", last < first/2)
	// Output:
	// precision: bf16-mixed+fp8
	// loss fell by more than half: true
}

// Save writes the weights, the AdamW moments and the precision's state
// (here the loss scaler's); Load into a fresh fabric continues as if the
// run had never stopped.
func ExampleFabric_Save() {
	dir, err := os.MkdirTemp("", "weft-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ckpt := filepath.Join(dir, "ckpt")

	straight, model, err := newGPTFabric("16-mixed")
	if err != nil {
		log.Fatal(err)
	}
	want, err := trainOn(straight, model, 0, 20)
	if err != nil {
		log.Fatal(err)
	}

	first, model, err := newGPTFabric("16-mixed")
	if err == nil {
		_, err = trainOn(first, model, 0, 10)
	}
	if err == nil {
		err = first.Save(context.Background(), ckpt, fabric.SaveOptions{Step: 10})
	}
	if err != nil {
		log.Fatal(err)
	}

	resumed, model, err := newGPTFabric("16-mixed")
	if err != nil {
		log.Fatal(err)
	}
	loaded, err := resumed.Load(ckpt, fabric.LoadOptions{})
	if err != nil {
		log.Fatal(err)
	}
	rest, err := trainOn(resumed, model, 10, 20)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("resumed at step", loaded.Manifest.Step)
	fmt.Println("the same losses as a straight run:", slices.Equal(rest, want[10:]))
	// Output:
	// resumed at step 10
	// the same losses as a straight run: true
}

// A policy gives parts of a model their own precision: the hybrid's CNN
// encoder computes in 16-mixed, its transformer in bf16-true, and one
// loss scaler serves the whole model because some of it computes in
// float16.
func ExampleConfig_policy() {
	pol, scaling, err := precision.ParsePolicy("bf16-true", []string{"vision.**=16-mixed"}, "auto", precision.Options{})
	if err != nil {
		log.Fatal(err)
	}
	f, err := fabric.New(fabric.Config{Policy: pol, LossScaling: scaling})
	if err != nil {
		log.Fatal(err)
	}
	model := models.NewHybrid(nn.NewInit(1), models.DefaultHybrid)
	opt, err := optim.NewAdamW(nn.Parameters(model), optim.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
	if err != nil {
		log.Fatal(err)
	}
	if err := f.Setup(model, opt); err != nil {
		log.Fatal(err)
	}
	for _, s := range f.Resolution().Scopes {
		if s.Path == "vision.conv1" || s.Path == "decoder.blocks.0.qkv" {
			fmt.Println(s.Path, s.Plugin.Name())
		}
	}
	fmt.Println("scales the loss:", f.Resolution().ScalesLoss())
	// Output:
	// vision.conv1 16-mixed
	// decoder.blocks.0.qkv bf16-true
	// scales the loss: true
}

// Two ranks, here goroutines of one process, average a value with
// Lightning Fabric's all_reduce.
func ExampleFabric_AllReduce() {
	means := make([]float64, 2)
	err := comm.Each(local.NewGroup(2, local.Options{}), func(r int, c comm.Communicator) error {
		f, err := fabric.New(fabric.Config{Strategy: "ddp", Comm: c})
		if err != nil {
			return err
		}
		mine := tensor.Scalar(dtype.F32, float64(10*(r+1))) // 10 on rank 0, 20 on rank 1
		mean, err := f.AllReduce(context.Background(), mine, fabric.Mean)
		if err != nil {
			return err
		}
		means[r] = mean.Float64s()[0]
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(means)
	// Output: [15 15]
}
