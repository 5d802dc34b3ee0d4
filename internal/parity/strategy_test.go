package parity

import (
	"fmt"
	"testing"

	"github.com/weftml/weft/models"
	"github.com/weftml/weft/precision"
)

// TestParityStrategies: every strategy on 2 and 4 in-process ranks, the
// global batch split evenly, replays the single-device 64-true trajectory
// of every model to 1e-9.
func TestParityStrategies(t *testing.T) {
	dir := referenceDir()
	ref, err := models.LoadReference(dir)
	if err != nil {
		t.Fatal(err)
	}
	traj, err := LoadTrajectories(dir)
	if err != nil {
		t.Fatal(err)
	}
	newPlugin := func() precision.Plugin { p, _ := precision.Parse("64-true", precision.Options{}); return p }
	for _, model := range traj.ModelNames() {
		steps := traj.Models[model].Steps
		single, err := TrainOn(ref, model, steps, newPlugin, Dist{Strategy: "single", Devices: 1, Backend: "local"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range []string{"ddp", "zero1", "zero2", "fsdp"} {
			for _, n := range []int{2, 4} {
				t.Run(fmt.Sprintf("%s/%s/%d", model, st, n), func(t *testing.T) {
					t.Parallel()
					res, err := TrainOn(ref, model, steps, newPlugin, Dist{Strategy: st, Devices: n, Backend: "local"}, nil)
					if err != nil {
						t.Fatal(err)
					}
					want := make([]*float64, len(single.Losses))
					for i, l := range single.Losses {
						v := float64(l)
						want[i] = &v
					}
					if err := compareLosses(res.Losses, want, Tolerance{1e-9, 1e-9}); err != nil {
						t.Error(err)
					}
					if len(res.Ranks) != n {
						t.Fatalf("%d rank reports", len(res.Ranks))
					}
				})
			}
		}
	}
}
