// Package bench measures weft's GEMMs (beside OpenBLAS when installed) and
// training steps, for `weft bench`.
package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"
	"unsafe"

	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/internal/gemm"
	"github.com/weftml/weft/internal/openblas"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/quant"
	"github.com/weftml/weft/tensor"
)

// GEMMResult is the speed of one n×n×n product.
type GEMMResult struct {
	Impl   string  `json:"impl"`
	N      int     `json:"n"`
	GFLOPS float64 `json:"gflops"`
}

// GEMMImpls are the products `weft bench gemm` measures: C = A·Bᵀ with A
// float32 activations and B weights stored as named (both bf16 for
// weft-bf16; NF4 codes with block absmax for weft-nf4w, decoded while packing).
var GEMMImpls = []string{"weft-f32", "weft-bf16", "weft-fp8w", "weft-nf4w", "openblas-f32"}

// GEMM measures every impl at every size for at least minTime each; OpenBLAS
// is skipped (and reported in skipped) when libopenblas is not installed.
func GEMM(sizes []int, minTime time.Duration) (res []GEMMResult, skipped []string) {
	blas := openblas.Load()
	if blas != nil {
		skipped = append(skipped, blas.Error())
	}
	for _, n := range sizes {
		rng := rand.New(rand.NewPCG(uint64(n), 0))
		a, b, c := randSlice(rng, n*n), randSlice(rng, n*n), make([]float32, n*n)
		mat := func(dt dtype.DType, vals []float32, scale float32) gemm.Matrix {
			data := make([]byte, dt.StorageBytes(len(vals)))
			dtype.Encode(dt, data, vals, true)
			return gemm.Matrix{DType: dt, Data: data, LD: n, Trans: true, Scale: scale}
		}
		f32 := func(vals []float32, trans bool) gemm.Matrix {
			return gemm.Matrix{DType: dtype.F32, Data: unsafe.Slice((*byte)(unsafe.Pointer(&vals[0])), 4*len(vals)), LD: n, Trans: trans}
		}
		// Operands are built outside the timed region.
		bf16A, bf16B, fp8B, f32A := mat(dtype.BF16, a, 0), mat(dtype.BF16, b, 0), mat(dtype.E4M3FN, b, 1), f32(a, false)
		nf4 := quant.Quantize4(quant.NF4, tensor.FromFloat32(b, n, n), quant.DefaultBlockSize, false)
		nf4B := gemm.Matrix{Data: nf4.Codes.Data(), LD: n, Trans: true, Codebook: nf4.Codebook.Values(), Absmax: nf4.Absmax, BlockSize: nf4.BlockSize}
		runs := map[string]func(){
			"weft-nf4w": func() { gemm.F32(n, n, n, f32A, nf4B, 0, c, n) },
			"weft-f32":  func() { gemm.Sgemm(false, true, n, n, n, a, n, b, n, 0, c, n) },
			"weft-bf16": func() { gemm.F32(n, n, n, bf16A, bf16B, 0, c, n) },
			"weft-fp8w": func() { gemm.F32(n, n, n, f32A, fp8B, 0, c, n) },
		}
		if blas == nil {
			runs["openblas-f32"] = func() { openblas.Sgemm(false, true, n, n, n, a, n, b, n, 0, c, n) }
		}
		for _, impl := range GEMMImpls {
			if run, ok := runs[impl]; ok {
				res = append(res, GEMMResult{Impl: impl, N: n, GFLOPS: 2 * float64(n) * float64(n) * float64(n) / timeIt(run, minTime).Seconds() / 1e9})
			}
		}
	}
	return res, skipped
}

// timeIt returns the mean time of run over at least minTime, after one warm-up.
func timeIt(run func(), minTime time.Duration) time.Duration {
	run()
	start, reps := time.Now(), 0
	for time.Since(start) < minTime || reps == 0 {
		run()
		reps++
	}
	return time.Since(start) / time.Duration(reps)
}

func randSlice(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}

// StepResult is the time and allocations of one training step.
type StepResult struct {
	Model     string  `json:"model"`
	Precision string  `json:"precision"`
	MS        float64 `json:"ms"`
	Allocs    float64 `json:"allocs"`
}

// Step times steps training steps (after warm-up) of model with precision
// on a synthetic batch of the model's reference shape.
func Step(model, spec string, steps int) (StepResult, error) {
	p, err := precision.Parse(spec, precision.Options{})
	if err != nil {
		return StepResult{}, err
	}
	step, err := newStep(model, p)
	if err != nil {
		return StepResult{}, err
	}
	for range 3 {
		if err := step(); err != nil {
			return StepResult{}, err
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	for range steps {
		if err := step(); err != nil {
			return StepResult{}, err
		}
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	return StepResult{Model: model, Precision: p.Name(), MS: float64(elapsed.Microseconds()) / 1e3 / float64(steps),
		Allocs: float64(after.Mallocs-before.Mallocs) / float64(steps)}, nil
}

// newStep builds model with precision p, AdamW and a synthetic batch of
// the model's reference shape, and returns one training step over them.
func newStep(model string, p precision.Plugin) (func() error, error) {
	m, err := models.New(model, 1)
	if err != nil {
		return nil, err
	}
	batch, err := syntheticBatch(model)
	if err != nil {
		return nil, err
	}
	opt, err := optim.NewAdamW(nn.Parameters(m), optim.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	if err != nil {
		return nil, err
	}
	f := fabric.New(p)
	if err := f.Setup(m, opt); err != nil {
		return nil, err
	}
	return func() error {
		_, err := f.TrainStep(context.Background(), m, batch)
		return err
	}, nil
}

// syntheticBatch is a random batch of the shapes the reference runs use
// (mlp784: 64 flattened 28×28 images).
func syntheticBatch(model string) (data.Batch, error) {
	rng := rand.New(rand.NewPCG(7, 7))
	labels := func(n, classes int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = rng.IntN(classes)
		}
		return out
	}
	images := func(shape ...int) *tensor.Tensor {
		n := 1
		for _, d := range shape {
			n *= d
		}
		return tensor.FromFloat32(randSlice(rng, n), shape...)
	}
	switch model {
	case "mlp784":
		return data.Batch{X: images(64, 784), Targets: labels(64, 10)}, nil
	case "mlp":
		return data.Batch{X: images(64, 32), Targets: labels(64, 10)}, nil
	case "cnn":
		return data.Batch{X: images(32, 1, 12, 12), Targets: labels(32, 10)}, nil
	case "gpt":
		return data.Batch{Tokens: labels(8*16, 48), Shape: []int{8, 16}, Targets: labels(8*16, 48)}, nil
	}
	return data.Batch{}, fmt.Errorf("bench: no step benchmark for model %q (mlp784, mlp, cnn, gpt)", model)
}
