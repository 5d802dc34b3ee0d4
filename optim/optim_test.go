package optim

import (
	"math"
	"strings"
	"testing"
)

// TestNewAdamWRefuses: a hyperparameter out of its range is refused by
// name, the learning rate 0 (which would train nothing) among them.
func TestNewAdamWRefuses(t *testing.T) {
	good := AdamWConfig{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	if _, err := NewAdamW(nil, good); err != nil {
		t.Fatalf("%+v: %v", good, err)
	}
	for _, tt := range []struct {
		edit func(*AdamWConfig)
		want string
	}{
		{func(c *AdamWConfig) { c.LR = 0 }, "learning rate 0: want a positive number"},
		{func(c *AdamWConfig) { c.LR = math.NaN() }, "learning rate NaN"},
		{func(c *AdamWConfig) { c.LR = -1 }, "learning rate -1"},
		{func(c *AdamWConfig) { c.Beta1 = 1 }, "beta1 1: want 0 <= beta1 < 1"},
		{func(c *AdamWConfig) { c.Beta2 = -0.1 }, "beta2 -0.1"},
		{func(c *AdamWConfig) { c.Eps = math.NaN() }, "eps NaN"},
		{func(c *AdamWConfig) { c.WeightDecay = math.Inf(1) }, "weight decay +Inf"},
	} {
		cfg := good
		tt.edit(&cfg)
		_, err := NewAdamW(nil, cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "{") {
			t.Errorf("%+v: error %v, want one naming %q", cfg, err, tt.want)
		}
	}
}
