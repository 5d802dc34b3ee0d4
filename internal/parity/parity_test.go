package parity

import (
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/models"
)

func referenceDir() string { return models.ReferenceDir("../../" + models.DefaultReferenceDir) }

// TestParityDTypes replays every model of trajectories.json that has a
// float64-manual or 32-true run, in pure float64 or float32.
func TestParityDTypes(t *testing.T) {
	dir := referenceDir()
	ref, err := models.LoadReference(dir)
	if err != nil {
		t.Fatal(err)
	}
	traj, err := LoadTrajectories(dir)
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, model := range traj.ModelNames() {
		for dt, target := range Targets {
			run, ok := traj.Models[model].Runs[target.Run]
			if !ok {
				continue
			}
			ran++
			t.Run(model+"/"+target.Run, func(t *testing.T) {
				t.Parallel()
				res, err := Train(ref, model, len(run.Losses), dt, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := CompareLosses(res.Losses, run.Losses, target.Tol); err != nil {
					t.Error(err)
				}
				if dt == dtype.F64 {
					if err := CompareFinal64(ref, res, 1e-8); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
	if ran == 0 {
		t.Fatal("no float64-manual or 32-true run found in trajectories.json")
	}
}
