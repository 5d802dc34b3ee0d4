package fabric_test

import (
	"context"
	"testing"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/local"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
)

// TestPredictedTrafficIsSent: what a plan predicts each rank sends in a
// step is what its communicators count, the loss's gather aside (under
// 1%), under fsdp and under hsdp (2 groups of 2) on 4 in-process ranks,
// which share one host. Placed on 2 hosts of 2 ranks, hsdp sends between
// them a third of what fsdp does: fsdp gathers every parameter twice and
// reduce-scatters its gradient over 2 peers on the other host, hsdp only
// all-reduces its gradient chunk (half the gradient) with 1.
func TestPredictedTrafficIsSent(t *testing.T) {
	spec, err := precision.ParseSpec("64-true", precision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	plan := func(st string, perHost int) *fabric.Traffic {
		p, err := fabric.MakePlan(models.NewMLP(nn.NewInit(1)), precision.Policy{Default: spec}, precision.LossScalingAuto, st, 4)
		if err != nil {
			t.Fatal(err)
		}
		p.ShardWithin(2)
		p.PredictTraffic(perHost, false)
		return p.Traffic
	}
	bs := f64Batches(1, 8)
	for _, st := range []string{"fsdp", "hsdp"} {
		sent := make([]int64, 4)
		err := comm.Each(local.NewGroup(4, local.Options{}), func(i int, c comm.Communicator) error {
			ctx := context.Background()
			var cfg fabric.Config
			if st == "hsdp" {
				h, err := comm.NewHybrid(ctx, c, 2)
				if err != nil {
					return err
				}
				defer h.Close()
				cfg.Sharding.Hybrid = h
			}
			m := models.NewMLP(nn.NewInit(1))
			f, err := pureF64(m, st, c, cfg)
			if err != nil {
				return err
			}
			if _, err := f.TrainStep(ctx, m, bs[0]); err != nil {
				return err
			}
			stats := []comm.Stats{c.Stats()}
			if h := cfg.Sharding.Hybrid; h != nil {
				stats = append(stats, h.Shard.Stats(), h.Replica.Stats())
			}
			for _, s := range stats {
				sent[i] += s.InsideHost + s.BetweenHosts
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		want := plan(st, 4)
		for r, got := range sent {
			if want.BetweenHosts != 0 || got < want.InsideHost || got > want.InsideHost+want.InsideHost/100 {
				t.Errorf("%s rank %d sent %d bytes; the plan predicts %d inside its host, %d between hosts", st, r, got, want.InsideHost, want.BetweenHosts)
			}
		}
	}
	fsdp, hsdp := plan("fsdp", 2), plan("hsdp", 2)
	if d := 3*hsdp.BetweenHosts - fsdp.BetweenHosts; hsdp.BetweenHosts == 0 || max(d, -d) > fsdp.BetweenHosts/100 {
		t.Errorf("between 2 hosts of 2 ranks fsdp sends %d bytes a step, hsdp %d; want a third (to the chunks' padding)", fsdp.BetweenHosts, hsdp.BetweenHosts)
	}
}
