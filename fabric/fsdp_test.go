package fabric_test

import (
	"context"
	"fmt"
	"slices"
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
	"github.com/weftml/weft/strategy"
	"github.com/weftml/weft/tensor"
)

// stack is a model of layers in a list, each an FSDP unit, that probes
// inside every layer's scope, in the forward and (through OnBackward) in
// the backward, how many layers hold their weight whole and their
// gradient in full.
type stack struct {
	Layers nn.List[*probed]
	// mostWhole and mostGrads are the largest counts any probe saw.
	mostWhole, mostGrads int
}

// probed is a Linear whose forward probes its stack.
type probed struct {
	FC *nn.Linear
	s  *stack
}

func (p *probed) Params() []nn.Param   { return nil }
func (p *probed) Children() []nn.Child { return []nn.Child{{Name: "fc", Module: p.FC}} }

func (p *probed) Forward(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	x, exit := tp.Enter(p, x)
	p.s.probe()
	y := tp.GELU(p.FC.Forward(tp, x))
	tp.OnBackward(func() error { p.s.probe(); return nil }) // after the gather for this layer's backward
	return exit(y)
}

func (s *stack) Params() []nn.Param   { return nil }
func (s *stack) Children() []nn.Child { return []nn.Child{{Name: "layers", Module: s.Layers}} }

func (s *stack) Forward(tp *autograd.Tape, b data.Batch) (*autograd.Var, error) {
	x := tp.Const(b.X)
	for _, l := range s.Layers {
		x = l.Forward(tp, x)
	}
	return x, nil
}

func (s *stack) probe() {
	var whole, grads int
	for _, l := range s.Layers {
		if !l.FC.Weight.Value.IsMeta() {
			whole++
		}
		if l.FC.Weight.Grad != nil {
			grads++
		}
	}
	s.mostWhole, s.mostGrads = max(s.mostWhole, whole), max(s.mostGrads, grads)
}

// TestFSDPUnitLifetimes: under FSDP a unit's weight is whole only around
// its own forward and backward (the next unit's gather, in flight
// meanwhile, is installed when that unit starts), and no full gradient
// outlives the backward of its unit; kept after forward, every unit is
// whole from its forward to its backward; DDP keeps every weight whole.
func TestFSDPUnitLifetimes(t *testing.T) {
	const width, depth = 16, 6
	b := data.Batch{X: tensor.New(dtype.F32, 4, width), Targets: []int{1, 2, 3, 4}}
	for _, c := range []struct {
		strategy  string
		keep      bool
		wantWhole int
	}{{"fsdp", false, 1}, {"fsdp", true, depth}, {"ddp", false, depth}} {
		var seen [2][2]int
		err := comm.Each(local.NewGroup(2, local.Options{}), func(i int, cm comm.Communicator) error {
			init := nn.NewInit(3)
			s := &stack{}
			for range depth {
				s.Layers = append(s.Layers, &probed{FC: nn.NewLinear(init, width, width, true), s: s})
			}
			f, err := distributed(s, "32-true", c.strategy, strategy.Options{KeepAfterForward: c.keep}, cm)
			if err != nil {
				return err
			}
			for range 2 {
				if _, err := f.TrainStep(context.Background(), s, rankShare(t, f, b)); err != nil {
					return err
				}
			}
			seen[i] = [2]int{s.mostWhole, s.mostGrads}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for r, got := range seen {
			if got[0] != c.wantWhole || got[1] > 1 {
				t.Errorf("%s (keep after forward %v), rank %d: at most %d weights whole and %d full gradients at a probe; want %d and at most 1", c.strategy, c.keep, r, got[0], got[1], c.wantWhole)
			}
		}
	}
}

// TestFSDPShardsFrozenWeights: under FSDP each rank holds 1/N of the packed
// 4-bit codes (whole blocks, zero-padded), between steps as after setup,
// and trains the same losses, bit for bit, as DDP, which holds them whole.
func TestFSDPShardsFrozenWeights(t *testing.T) {
	cfg := models.GPTConfig{Vocab: 24, Context: 8, Width: 64, Heads: 2, Layers: 2}
	batch := tokenBatch(2, 4, cfg.Context, cfg.Vocab)
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			losses := map[string][][]float64{}
			for _, st := range []string{"ddp", "fsdp"} {
				per := make([][]float64, n)
				err := comm.Each(local.NewGroup(n, local.Options{}), func(i int, c comm.Communicator) error {
					m := models.NewGPT(nn.NewInit(5), cfg)
					f, err := distributed(m, "bf16-true+nf4-dq", st, strategy.Options{}, c)
					if err != nil {
						return err
					}
					want := frozenChunks(m, n)
					for step := range 3 {
						if st == "fsdp" {
							if got := f.Rank().FrozenBytes(); got != want {
								return fmt.Errorf("rank %d before step %d holds %d bytes of codes; 1/%d is %d", i, step, got, n, want)
							}
						}
						res, err := f.TrainStep(context.Background(), m, rankShare(t, f, batch))
						if err != nil {
							return err
						}
						per[i] = append(per[i], res.Loss)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				losses[st] = per
			}
			for r := range n {
				if !slices.Equal(losses["fsdp"][r], losses["ddp"][r]) {
					t.Errorf("rank %d: fsdp losses %v, ddp %v", r, losses["fsdp"][r], losses["ddp"][r])
				}
			}
		})
	}
}

// frozenChunks is the bytes of one rank's chunks of m's frozen weights
// over n ranks: each cut in whole blocks, the last zero-padded.
func frozenChunks(m nn.Module, n int) int64 {
	var b int64
	nn.Walk(m, func(_ string, mod nn.Module) {
		for _, fz := range nn.FrozenOf(mod) {
			blocks := ((*fz.Value).Len() + fz.Block - 1) / fz.Block
			b += int64((blocks + n - 1) / n * fz.Block)
		}
	})
	return b
}

// distributed sets up m on rank c of strategy st in precision spec.
func distributed(m fabric.Model, spec, st string, opts strategy.Options, c comm.Communicator) (*fabric.Fabric, error) {
	pol, _, err := precision.ParsePolicy(spec, nil, "auto", precision.Options{})
	if err != nil {
		return nil, err
	}
	opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
	if err != nil {
		return nil, err
	}
	f, err := fabric.New(fabric.Config{Policy: pol, Strategy: st, Comm: c, Sharding: opts})
	if err != nil {
		return nil, err
	}
	return f, f.Setup(m, opt)
}

// TestFSDPComputesWithFP8Codes: with transformer-engine under FSDP, each
// FP8 Linear multiplies its weight's gathered codes as they arrive: no
// rank ever decodes a whole weight (the probes see none whole), and the
// losses are DDP's, bit for bit, since the codes and the amaxes (of the
// exact chunks, agreed over ranks) are those of a whole weight.
func TestFSDPComputesWithFP8Codes(t *testing.T) {
	const width, depth = 32, 4
	x := tensor.New(dtype.F32, 4, width)
	for i := range x.Len() {
		x.Flat(i, 1).Fill(float64(i%7) - 3)
	}
	b := data.Batch{X: x, Targets: []int{1, 2, 3, 4}}
	losses := map[string][]float64{}
	for _, st := range []string{"ddp", "fsdp"} {
		var seen [2]int
		var rank0 []float64
		err := comm.Each(local.NewGroup(2, local.Options{}), func(i int, cm comm.Communicator) error {
			init := nn.NewInit(4)
			s := &stack{}
			for range depth {
				s.Layers = append(s.Layers, &probed{FC: nn.NewLinear(init, width, width, true), s: s})
			}
			f, err := distributed(s, "transformer-engine", st, strategy.Options{}, cm)
			if err != nil {
				return err
			}
			for range 3 {
				res, err := f.TrainStep(context.Background(), s, rankShare(t, f, b))
				if err != nil {
					return err
				}
				if i == 0 {
					rank0 = append(rank0, res.Loss)
				}
			}
			seen[i] = s.mostWhole
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		want := depth
		if st == "fsdp" {
			want = 0
		}
		if seen != [2]int{want, want} {
			t.Errorf("%s: at most %v weights whole at a probe, want %d", st, seen, want)
		}
		losses[st] = rank0
	}
	if !slices.Equal(losses["fsdp"], losses["ddp"]) {
		t.Errorf("fsdp losses %v, ddp %v", losses["fsdp"], losses["ddp"])
	}
}

// TestFSDPTiedHead: a gpt whose head is its token embedding (GPT-2's)
// trains under fsdp on 2 ranks, built whole or on shapes, as on one
// device (float64, to 1e-12): the embedding is no unit of its own, so it
// stays whole where the head reads it (strategy.TiedModel).
func TestFSDPTiedHead(t *testing.T) {
	cfg, b := gptBatch(true)
	train := func(st string, c comm.Communicator, empty bool) ([]float64, error) {
		pol, _, err := precision.ParsePolicy("64-true", nil, "auto", precision.Options{})
		if err != nil {
			return nil, err
		}
		fc := fabric.Config{Policy: pol, Seed: 3, Strategy: st, Comm: c}
		if st == "single" {
			fc.Comm = nil
		}
		f, err := fabric.New(fc)
		if err != nil {
			return nil, err
		}
		m := models.NewGPT(f.InitModule(empty), cfg)
		opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
		if err != nil {
			return nil, err
		}
		if err := f.Setup(m, opt); err != nil {
			return nil, err
		}
		var losses []float64
		for range 3 {
			res, err := f.TrainStep(context.Background(), m, rankShare(t, f, b))
			if err != nil {
				return nil, err
			}
			losses = append(losses, res.Loss)
		}
		return losses, nil
	}
	want, err := train("single", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, empty := range []bool{false, true} {
		onRanks(t, 2, func(r int, c comm.Communicator) error {
			got, err := train("fsdp", c, empty)
			if err != nil {
				return err
			}
			for i := range want {
				if d := got[i] - want[i]; d > 1e-12 || d < -1e-12 {
					return fmt.Errorf("empty %v, rank %d, step %d: loss %.15g, one device %.15g", empty, r, i, got[i], want[i])
				}
			}
			return nil
		})
	}
}
