package fabric_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/strategy"
)

// lightningClasses maps Lightning's precision plugin classes to the weft
// spec with the same semantics (HalfPrecision and MixedPrecision in their
// bf16 form).
var lightningClasses = map[string]string{
	"DoublePrecision":            "64-true",
	"Precision":                  "32-true",
	"MixedPrecision":             "bf16-mixed",
	"HalfPrecision":              "bf16-true",
	"FSDPPrecision":              "bf16-mixed",
	"TransformerEnginePrecision": "transformer-engine",
}

type matrixRow struct {
	Strategy       string `json:"strategy"`
	Precision      any    `json:"precision"`
	PluginInstance string `json:"plugin_instance"`
	TwoPlugins     string `json:"two_plugins"`
	Error          string `json:"error"`
}

// spec is the weft precision spec a row asks for.
func (r matrixRow) spec(t *testing.T) string {
	var classes []string
	switch {
	case r.Precision != nil:
		return fmt.Sprint(r.Precision)
	case r.PluginInstance != "":
		classes = []string{r.PluginInstance}
	case r.TwoPlugins != "":
		classes = strings.Split(r.TwoPlugins, "+")
	}
	specs := make([]string, len(classes))
	for i, c := range classes {
		s, ok := lightningClasses[c]
		if !ok {
			t.Fatalf("no weft equivalent of Lightning's %s", c)
		}
		specs[i] = s
	}
	return strings.Join(specs, "+")
}

// TestLightningMatrixInverted plans every row of lightning-matrix.json whose
// strategy weft has (the two-plugin row on every strategy): each must
// resolve, the cells Lightning refuses included.
func TestLightningMatrixInverted(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(models.ReferenceDir("../"+models.DefaultReferenceDir), "lightning-matrix.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Rows []matrixRow }
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, r := range m.Rows {
		strategies := []string{r.Strategy}
		if r.Strategy == "" {
			strategies = strategy.Names()
		} else if _, err := strategy.Lookup(r.Strategy); err != nil {
			continue // deepspeed, xla, dp, model_parallel: not weft strategies
		}
		spec := r.spec(t)
		for _, st := range strategies {
			t.Run(st+"/"+spec, func(t *testing.T) {
				p, err := precision.ParseSpec(spec, precision.Options{})
				if err == nil {
					model := models.NewGPT(nn.NewInit(1), models.ReferenceGPT)
					_, err = fabric.MakePlan(model, precision.Policy{Default: p}, precision.LossScalingAuto, st, 2)
				}
				var conflict *precision.ConflictError
				switch {
				case errors.As(err, &conflict):
					t.Fatalf("weft refuses %s on %s for a conflict Lightning does not report: %v", spec, st, err)
				case err != nil:
					t.Fatalf("weft cannot plan %s on %s: %v (Lightning: %s)", spec, st, err, r.Error)
				}
			})
			if r.Error != "" {
				refused++
			}
		}
	}
	if refused == 0 {
		t.Fatal("the matrix has no cell Lightning refuses; is it the right file?")
	}
	t.Logf("weft plans %d cells that Lightning refuses", refused)
}
