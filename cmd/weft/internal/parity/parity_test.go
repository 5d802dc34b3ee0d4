package parity

import (
	"testing"

	"github.com/weftml/weft/models"
)

func referenceDir() string { return models.ReferenceDir("../../../../" + models.DefaultReferenceDir) }

// TestParity replays every run of every model in trajectories.json (a run
// weft has no replay for fails) and compares losses and loss scales; the
// float64-manual replay must also end at the reference's float64 weights.
func TestParity(t *testing.T) {
	ref, traj := loadReference(t)
	if len(traj.Models) == 0 {
		t.Fatal("trajectories.json has no models")
	}
	for _, model := range traj.ModelNames() {
		for _, runName := range sortedKeys(traj.Models[model].Runs) {
			run := traj.Models[model].Runs[runName]
			t.Run(model+"/"+runName, func(t *testing.T) {
				t.Parallel()
				c, err := CaseFor(runName)
				if err != nil {
					t.Fatal(err)
				}
				res, err := Train(ref, model, len(run.Losses), c.Spec, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := Compare(res, run, c.Tol); err != nil {
					t.Error(err)
				}
				if runName == "float64-manual" {
					if err := CompareFinal64(ref, res, 1e-8); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
}

// loadReference reads the reference folder's weights, data and trajectories.
func loadReference(t *testing.T) (*models.Reference, *Trajectories) {
	t.Helper()
	dir := referenceDir()
	ref, err := models.LoadReference(dir)
	if err != nil {
		t.Fatal(err)
	}
	traj, err := LoadTrajectories(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ref, traj
}
