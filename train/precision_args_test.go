package train

import (
	"testing"

	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/fp8"
)

// TestConfigSpecArgs: spec arguments in a config's precision: and
// modules: reach the plugins the run builds.
func TestConfigSpecArgs(t *testing.T) {
	c := Defaults()
	yaml := "precision:\n  spec: bf16-mixed+fp8(margin=2,history=8)\n  modules:\n    - match: head\n      precision: fp8(algo=most_recent)\n"
	if _, err := ParseConfig([]byte(yaml), &c); err != nil {
		t.Fatal(err)
	}
	pol, _, err := c.policy(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := pol.Default.String(); got != "bf16-mixed+fp8(margin=2,history=8)" {
		t.Errorf("precision %q", got)
	}
	root, err := pol.Default.New()
	if err != nil {
		t.Fatal(err)
	}
	if d := precision.Members(root)[1].(*fp8.Delayed); d.Margin != 2 || d.HistoryLen != 8 {
		t.Errorf("fp8 margin %d, history %d; want 2 and 8", d.Margin, d.HistoryLen)
	}
	head, err := pol.Rules[0].Spec.New()
	if err != nil {
		t.Fatal(err)
	}
	if d := head.(*fp8.Delayed); d.Algo != fp8.AmaxMostRecent || d.HistoryLen != 1024 {
		t.Errorf("head's fp8 algo %v, history %d; want most_recent and the default 1024", d.Algo, d.HistoryLen)
	}
}
