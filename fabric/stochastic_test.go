package fabric_test

import (
	"context"
	"math"
	"testing"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
)

// TestStochasticRoundStrategies: a gpt trained 3 steps under
// bf16-true(stochastic_round=true) on 2 ranks has the losses and weights
// of ddp, whose optimizer updates whole parameters, bit for bit under
// zero2 and fsdp, whose ranks update chunks of them: each element draws
// the bits of its index in the whole parameter. The weights are not those
// of bf16-true, and stochastic_round=false is bf16-true bit for bit.
func TestStochasticRoundStrategies(t *testing.T) {
	const sr = "bf16-true(stochastic_round=true)"
	run := func(spec, st string) []gptRun {
		runs := make([]gptRun, 2)
		onRanks(t, 2, func(r int, cm comm.Communicator) (err error) {
			runs[r], err = trainGPT(t, spec, st, cm, false, 3)
			return err
		})
		return runs
	}
	ddp := run(sr, "ddp")
	for _, st := range []string{"zero2", "fsdp"} {
		for r, got := range run(sr, st) {
			if d := sameRun(got, ddp[r]); d != "" {
				t.Errorf("%s rank %d: %s and ddp differ: %s", sr, r, st, d)
			}
		}
	}
	nearest := run("bf16-true", "ddp")
	if sameRun(nearest[0], ddp[0]) == "" {
		t.Errorf("%s trained the weights of bf16-true", sr)
	}
	if d := sameRun(run("bf16-true(stochastic_round=false)", "ddp")[0], nearest[0]); d != "" {
		t.Errorf("bf16-true(stochastic_round=false) and bf16-true differ: %s", d)
	}
}

// TestStochasticRoundTrains: 30 steps of the mlp on one batch under
// bf16-true(stochastic_round=true) give finite losses that fall to below
// half the first, its weights in bfloat16; an SGD, which cannot round
// stochastically, is refused.
func TestStochasticRoundTrains(t *testing.T) {
	f, m := mlpFabric(t, 1, "bf16-true(stochastic_round=true)", "", nil)
	var losses []float64
	for range 30 {
		res, err := f.TrainStep(context.Background(), m, mlpBatch(0))
		if err != nil {
			t.Fatal(err)
		}
		if math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0) {
			t.Fatalf("step %d: loss %v", len(losses), res.Loss)
		}
		losses = append(losses, res.Loss)
	}
	if first, last := losses[0], losses[len(losses)-1]; !(last < 0.5*first) {
		t.Errorf("loss %v after 30 steps from %v: want it at least halved", last, first)
	}
	if dt := m.FC1.Weight.Value.DType(); dt != dtype.BF16 {
		t.Errorf("fc1.weight in %s, want bfloat16", dt)
	}

	sgd := models.NewMLP(nn.NewInit(1))
	p, err := precision.Parse("bf16-true(stochastic_round=true)", precision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = newFabric(t, fabric.Config{Precision: p}).Setup(sgd, optim.NewSGD(nn.Parameters(sgd), 1e-2))
	if err == nil || err.Error() != "fabric: setup: precision bf16-true rounds parameters stochastically, which *optim.SGD cannot do" {
		t.Errorf("SGD under stochastic rounding: %v", err)
	}
}
