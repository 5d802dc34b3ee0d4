package fabric_test

import (
	"context"
	"testing"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/local"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/strategy"
	"github.com/weftml/weft/tensor"
)

// TestHSDPGathersFP8Codes: under hsdp (4 ranks, 2 shard groups of 2) with
// transformer-engine, a rank gathers each FP8 weight inside its group as
// 1 byte an element (its chunk of half the weight, for the forward and
// again for the backward) and computes with the codes, never decoding a
// weight whole.
func TestHSDPGathersFP8Codes(t *testing.T) {
	const width, depth = 32, 4
	x := tensor.New(dtype.F32, 8, width)
	for i := range x.Len() {
		x.Flat(i, 1).Fill(float64(i%7) - 3)
	}
	b := data.Batch{X: x, Targets: []int{1, 2, 3, 4, 5, 6, 7, 8}}
	var seen [4]int
	var codes [4]int64
	err := comm.Each(local.NewGroup(4, local.Options{}), func(i int, cm comm.Communicator) error {
		h, err := comm.NewHybrid(context.Background(), cm, 2)
		if err != nil {
			return err
		}
		defer h.Close()
		init := nn.NewInit(4)
		s := &stack{}
		for range depth {
			s.Layers = append(s.Layers, &probed{FC: nn.NewLinear(init, width, width, true), s: s})
		}
		f, err := distributed(s, "transformer-engine", "hsdp", strategy.Options{Hybrid: h}, cm)
		if err != nil {
			return err
		}
		if _, err := f.TrainStep(context.Background(), s, rankShare(t, f, b)); err != nil {
			return err
		}
		seen[i], codes[i] = s.mostWhole, f.Rank().Gathered()[dtype.E4M3FN]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := int64(2 * depth * width * width / 2) // two gathers of half of every weight
	for r := range 4 {
		if seen[r] != 0 || codes[r] != want {
			t.Errorf("rank %d: %d weights whole at a probe, %d bytes of E4M3 codes gathered; want 0 and %d", r, seen[r], codes[r], want)
		}
	}
}
