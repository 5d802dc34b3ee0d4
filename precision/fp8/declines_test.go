package fp8

import (
	"strings"
	"testing"

	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
)

// TestRecipesReportDeclines: each recipe converts a meta model's eligible
// Linears and says why it left the others: the shape DefaultFilter
// rejects, or the plugin's own Filter.
func TestRecipesReportDeclines(t *testing.T) {
	type reporter interface {
		converter
		Declined(path string) (string, bool)
	}
	own := NewCurrent()
	own.Filter = func(in, out int) bool { return in == 32 }
	for _, c := range []struct {
		p    reporter
		want map[string]string // path: a part of why it was declined; "" for converted
	}{
		{NewDelayed(), map[string]string{"fc1": "", "fc2": "", "head": "is 64→10, FP8 needs in%8==0 and out%16==0"}},
		{NewCurrent(), map[string]string{"fc1": "", "fc2": "", "head": "is 64→10, FP8 needs"}},
		{NewMX(), map[string]string{"fc1": "", "fc2": "", "head": "is 64→10, FP8 needs"}},
		{own, map[string]string{"fc1": "", "fc2": "is 64→64, which the plugin's Filter rejects", "head": "Filter rejects"}},
	} {
		m := models.NewMLP(nn.Meta(0))
		var err error
		nn.Walk(m, func(path string, mod nn.Module) {
			if err == nil {
				err = c.p.ConvertModule(path, mod)
			}
		})
		if err != nil {
			t.Fatalf("%T on a meta mlp: %v", c.p, err)
		}
		for path, want := range c.want {
			why, declined := c.p.Declined(path)
			if declined != (want != "") || !strings.Contains(why, want) {
				t.Errorf("%T: %s declined %v because %q, want %q", c.p, path, declined, why, want)
			}
		}
		if _, ok := c.p.Declined("norm"); ok {
			t.Errorf("%T says it declined the LayerNorm, which it never converts", c.p)
		}
	}
}
