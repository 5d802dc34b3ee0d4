package models_test

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
)

// TestMetaFilledInChunksIsTheBuild: every reference model built on shapes
// alone, each parameter then filled in 2, 3 and 4 chunks cut at arbitrary
// points (as ranks of a sharded strategy would), holds bit for bit the
// values of the model built with weights from the same seed.
func TestMetaFilledInChunksIsTheBuild(t *testing.T) {
	const seed = 42
	cuts := rand.New(rand.NewPCG(7, 7))
	for _, name := range models.Names() {
		full, err := models.New(name, seed)
		if err != nil {
			t.Fatal(err)
		}
		meta, err := models.NewMeta(name, seed)
		if err != nil {
			t.Fatal(err)
		}
		want, params := nn.Parameters(full), nn.Parameters(meta)
		for i, p := range params {
			n := p.Var.Value.Len()
			for chunks := 2; chunks <= 4; chunks++ {
				bounds := []int{0, n}
				for range chunks - 1 {
					bounds = append(bounds, cuts.IntN(n+1))
				}
				slices.Sort(bounds)
				var got []byte
				for c := range chunks {
					part, err := nn.InitRange(p.Var, bounds[c], bounds[c+1]-bounds[c])
					if err != nil {
						t.Fatalf("%s %s: %v", name, p.Path, err)
					}
					got = append(got, part.Data()...)
				}
				if !bytes.Equal(got, want[i].Var.Value.Data()) {
					t.Errorf("%s %s filled in chunks %v differs from the build", name, p.Path, bounds)
				}
			}
		}
	}
}
