// Package bench measures weft's GEMMs (beside OpenBLAS when installed) and
// training steps, for `weft bench`.
package bench

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"time"
	"unsafe"

	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/internal/gemm"
	"github.com/weftml/weft/internal/openblas"
	"github.com/weftml/weft/internal/proc"
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
// weft-bf16, on the path gemm.BF16Path chose, and for weft-bf16-dot and
// weft-bf16-widen, on those paths; NF4 codes with block absmax for
// weft-nf4w, decoded while packing).
var GEMMImpls = []string{"weft-f32", "weft-bf16", "weft-bf16-dot", "weft-bf16-widen", "weft-fp8w", "weft-nf4w", "openblas-f32"}

// gemmRounds is how many turns each impl takes at a size, interleaved with
// the others', so that a busy spell on a shared machine slows a turn of
// each rather than all of one.
const gemmRounds = 5

// GEMM measures impls (of GEMMImpls) at every size for at least minTime
// each, in interleaved turns, and reports each one's fastest turn;
// OpenBLAS is skipped (and reported in skipped) when libopenblas is not
// installed, and weft-bf16-dot where the CPU lacks VDPBF16PS.
func GEMM(sizes []int, impls []string, minTime time.Duration) (res []GEMMResult, skipped []string) {
	var blas error
	if slices.Contains(impls, "openblas-f32") {
		if blas = openblas.Load(); blas != nil {
			skipped = append(skipped, blas.Error())
		}
	}
	dot := slices.Contains(gemm.BF16Paths(), gemm.PathDot)
	if !dot && slices.Contains(impls, "weft-bf16-dot") {
		skipped = append(skipped, "weft-bf16-dot: this CPU has no VDPBF16PS")
	}
	chosen := gemm.BF16Path()
	defer gemm.SetBF16Path(chosen)
	// onPath runs f with two bfloat16 operands multiplied on path p.
	onPath := func(p string, f func()) func() {
		return func() {
			gemm.SetBF16Path(p)
			f()
		}
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
			"weft-nf4w":       func() { gemm.F32(n, n, n, f32A, nf4B, 0, c, n) },
			"weft-f32":        func() { gemm.Sgemm(false, true, n, n, n, a, n, b, n, 0, c, n) },
			"weft-bf16":       onPath(chosen, func() { gemm.F32(n, n, n, bf16A, bf16B, 0, c, n) }),
			"weft-bf16-widen": onPath(gemm.PathWiden, func() { gemm.F32(n, n, n, bf16A, bf16B, 0, c, n) }),
			"weft-fp8w":       func() { gemm.F32(n, n, n, f32A, fp8B, 0, c, n) },
		}
		if dot {
			runs["weft-bf16-dot"] = onPath(gemm.PathDot, func() { gemm.F32(n, n, n, bf16A, bf16B, 0, c, n) })
		}
		if blas == nil {
			runs["openblas-f32"] = func() { openblas.Sgemm(false, true, n, n, n, a, n, b, n, 0, c, n) }
		}
		var names []string
		for _, impl := range GEMMImpls {
			if _, ok := runs[impl]; ok && slices.Contains(impls, impl) {
				names = append(names, impl)
			}
		}
		best := make([]time.Duration, len(names))
		for range gemmRounds {
			for i, impl := range names {
				if d := timeIt(runs[impl], minTime/gemmRounds); best[i] == 0 || d < best[i] {
					best[i] = d
				}
			}
		}
		for i, impl := range names {
			res = append(res, GEMMResult{Impl: impl, N: n, GFLOPS: 2 * float64(n) * float64(n) * float64(n) / best[i].Seconds() / 1e9})
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

// StepConfig says which training step Step times.
type StepConfig struct {
	Model     string // "gpt"; mlp784, mlp and cnn run at their reference sizes
	Precision string // "32-true"
	Steps     int    // 20: timed steps, after 3 warm-up steps
	// GPT sizes the gpt (its vocabulary is the Go corpus's, as `weft
	// train` has it); zero: the reference gpt of the parity runs.
	GPT   models.GPTConfig
	Batch int // 8: sequences per step with GPT set
}

// StepResult is what one training step costs: its time, FLOP rate, cores
// and memory.
type StepResult struct {
	Model     string  `json:"model"`
	Precision string  `json:"precision"`
	Batch     int     `json:"batch"`
	Params    int64   `json:"params"`
	MS        float64 `json:"ms"` // the median step
	Allocs    float64 `json:"allocs"`
	// GFLOPS is 6·Params·tokens per step over the median step (attention's
	// own products are not counted); 0 for models without tokens.
	GFLOPS float64 `json:"gflops,omitempty"`
	// CoresBusy is the process's CPU time over the wall time of the timed
	// steps: 2 when both of two cores worked throughout.
	CoresBusy float64 `json:"cores_busy"`
	// PeakAlloc is the tensor allocator's high-water mark over the steps
	// (model, optimizer state and activations), PeakRSS the kernel's
	// (VmHWM) from just before the model was built; 0 where not known.
	PeakAlloc int64 `json:"peak_alloc"`
	PeakRSS   int64 `json:"peak_rss"`
	// OfGEMMPeak is GFLOPS over weft's f32 GEMM at n=1024 measured in the
	// same run (set by the caller, which measures that once).
	OfGEMMPeak float64 `json:"of_gemm_peak,omitempty"`
}

// Step times cfg.Steps training steps (after warm-up) of cfg.Model with
// AdamW on a synthetic batch.
func Step(ctx context.Context, cfg StepConfig) (StepResult, error) {
	p, err := precision.Parse(cfg.Precision, precision.Options{})
	if err != nil {
		return StepResult{}, err
	}
	if cfg.Steps < 1 {
		return StepResult{}, fmt.Errorf("bench: %d steps: want at least 1", cfg.Steps)
	}
	// Start both high-water marks from what earlier measurements left.
	debug.FreeOSMemory()
	rssErr := proc.ResetPeakRSS()
	tensor.ResetPeak()
	s, err := newStep(ctx, cfg, p)
	if err != nil {
		return StepResult{}, err
	}
	for range 3 {
		if err := s.run(); err != nil {
			return StepResult{}, err
		}
	}
	times := make([]time.Duration, cfg.Steps)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0, start := proc.CPUTime(), time.Now()
	for i := range times {
		t0 := time.Now()
		if err := s.run(); err != nil {
			return StepResult{}, err
		}
		times[i] = time.Since(t0)
	}
	wall, cpu := time.Since(start), proc.CPUTime()-cpu0
	runtime.ReadMemStats(&after)
	slices.Sort(times)
	median := times[len(times)/2]
	if len(times)%2 == 0 {
		median = (times[len(times)/2-1] + median) / 2
	}
	r := StepResult{Model: cfg.Model, Precision: p.Name(), Batch: s.batch, Params: s.params,
		MS:        float64(median) / 1e6,
		Allocs:    float64(after.Mallocs-before.Mallocs) / float64(cfg.Steps),
		CoresBusy: cpu.Seconds() / wall.Seconds(),
		PeakAlloc: tensor.Memory().Peak,
	}
	if rssErr == nil {
		r.PeakRSS = proc.PeakRSS()
	}
	if s.tokens > 0 {
		r.GFLOPS = 6 * float64(s.params) * float64(s.tokens) / median.Seconds() / 1e9
	}
	return r, nil
}

// step is one training step over a fixed batch, and what it trains.
type step struct {
	run           func() error
	params        int64
	batch, tokens int // sequences (or samples) and tokens per step
}

// newStep builds the model cfg names with precision p, AdamW and a
// synthetic batch, and returns one training step over them.
func newStep(ctx context.Context, cfg StepConfig, p precision.Plugin) (step, error) {
	var m models.Model
	if cfg.GPT != (models.GPTConfig{}) {
		if cfg.Model != "gpt" {
			return step{}, fmt.Errorf("bench: a gpt size was given for model %q", cfg.Model)
		}
		g := cfg.GPT
		if g.Layers < 1 || g.Width < 1 || g.Heads < 1 || g.Width%g.Heads != 0 || g.Context < 1 {
			return step{}, fmt.Errorf("bench: gpt %d layers, width %d, %d heads, context %d: want positive sizes and a width divisible by the heads", g.Layers, g.Width, g.Heads, g.Context)
		}
		g.Vocab = cmp.Or(g.Vocab, data.VocabSize)
		m = models.NewGPT(nn.NewInit(1), g)
		cfg.GPT = g
	} else {
		var err error
		if m, err = models.New(cfg.Model, 1); err != nil {
			return step{}, err
		}
	}
	b, err := syntheticBatch(cfg)
	if err != nil {
		return step{}, err
	}
	opt, err := optim.NewAdamW(nn.Parameters(m), optim.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	if err != nil {
		return step{}, err
	}
	var s step
	// Counted before Setup, which leaves a quantizing precision's frozen
	// weights out of the parameters: N is the model's, whatever trains.
	for _, prm := range nn.Parameters(m) {
		s.params += int64(prm.Var.Value.Len())
	}
	f, err := fabric.New(fabric.Config{Precision: p})
	if err != nil {
		return step{}, err
	}
	if err := f.Setup(m, opt); err != nil {
		return step{}, err
	}
	s.run = func() error {
		_, err := f.TrainStep(ctx, m, b)
		return err
	}
	s.batch = len(b.Targets)
	if b.Shape != nil {
		s.batch, s.tokens = b.Shape[0], len(b.Tokens)
	}
	return s, nil
}

// syntheticBatch is a random batch of the shapes the reference runs use
// (mlp784: 64 flattened 28×28 images), or of cfg.Batch sequences of the
// gpt's full context.
func syntheticBatch(cfg StepConfig) (data.Batch, error) {
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
	if g := cfg.GPT; g != (models.GPTConfig{}) {
		bs := cmp.Or(cfg.Batch, 8)
		if bs < 1 {
			return data.Batch{}, fmt.Errorf("bench: batch %d: want at least 1", bs)
		}
		return data.Batch{Tokens: labels(bs*g.Context, g.Vocab), Shape: []int{bs, g.Context}, Targets: labels(bs*g.Context, g.Vocab)}, nil
	}
	if cfg.Batch != 0 {
		return data.Batch{}, fmt.Errorf("bench: a batch size is taken with a gpt size only; %s runs at its reference batch", cfg.Model)
	}
	switch cfg.Model {
	case "mlp784":
		return data.Batch{X: images(64, 784), Targets: labels(64, 10)}, nil
	case "mlp":
		return data.Batch{X: images(64, 32), Targets: labels(64, 10)}, nil
	case "cnn":
		return data.Batch{X: images(32, 1, 12, 12), Targets: labels(32, 10)}, nil
	case "gpt":
		return data.Batch{Tokens: labels(8*16, 48), Shape: []int{8, 16}, Targets: labels(8*16, 48)}, nil
	}
	return data.Batch{}, fmt.Errorf("bench: no step benchmark for model %q (mlp784, mlp, cnn, gpt)", cfg.Model)
}
