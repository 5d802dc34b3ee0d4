package train

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
)

// TestParamDTypeTrains: FSDP2's param_dtype=bfloat16 (every parameter
// gathered in bfloat16, its float32 shard kept) trains a gpt on 2 fsdp
// ranks to finite, falling losses, under bf16-mixed and under 32-true
// with reduce_dtype=bfloat16 too, whose losses then are not 32-true's.
func TestParamDTypeTrains(t *testing.T) {
	run := func(spec string) []float64 {
		c := tinyConfig(t, spec)
		c.Strategy, c.Devices = "fsdp", 2
		if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		return losses(t, c.Out)
	}
	full := run("32-true")
	for _, spec := range []string{"bf16-mixed(param_dtype=bfloat16)", "32-true(param_dtype=bfloat16,reduce_dtype=bfloat16)"} {
		ls := run(spec)
		if slices.ContainsFunc(ls, func(l float64) bool { return math.IsNaN(l) || math.IsInf(l, 0) }) {
			t.Fatalf("%s: losses %v", spec, ls)
		}
		n := len(ls) / 4
		if first, last := mean(ls[:n]), mean(ls[len(ls)-n:]); !(last < first-0.1) {
			t.Errorf("%s: losses fall from %.3f to %.3f over %d steps: %v", spec, first, last, len(ls), ls)
		}
		if strings.HasPrefix(spec, "32-true") && slices.Equal(ls, full) {
			t.Errorf("%s: the losses of 32-true, bit for bit: the parameters did not travel in bfloat16", spec)
		}
	}
}

// TestPlanGathersHalf: weft plan's default gpt under bf16-mixed on 4 fsdp
// ranks gathers at most 0.6 of the bytes 32-true gathers, its Linears'
// weights in bfloat16; param_dtype under ddp, which gathers nothing, is
// refused, and so is param_dtype beside an FP8 recipe's gathers.
func TestPlanGathersHalf(t *testing.T) {
	gathered := map[string]int64{}
	for _, spec := range []string{"32-true", "bf16-mixed"} {
		c := Defaults()
		c.Precision, c.Strategy, c.Devices = spec, "fsdp", 4
		p, err := Plan(context.Background(), c, func(string) {})
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range p.Traffic.Gathers {
			gathered[spec] += g.Bytes
		}
		if spec == "bf16-mixed" && (len(p.Traffic.Gathers) != 2 || p.Traffic.Gathers[0].DType != "bfloat16") {
			t.Errorf("bf16-mixed gathers %+v, want bfloat16 first, then float32", p.Traffic.Gathers)
		}
	}
	if got, full := gathered["bf16-mixed"], gathered["32-true"]; float64(got) > 0.6*float64(full) {
		t.Errorf("bf16-mixed gathers %d bytes a step, 32-true %d: want at most 0.6 of it", got, full)
	}
	for _, bad := range []struct{ spec, strategy, want string }{
		{"bf16-mixed(param_dtype=bfloat16)", "ddp", "precision bf16-mixed gathers parameters in bfloat16 (param_dtype), but strategy ddp gathers none; use fsdp or hsdp, or drop param_dtype"},
		{"bf16-mixed(param_dtype=bfloat16)+fp8", "fsdp", "precision: role parameter gathers claimed by bf16-mixed (param_dtype=bfloat16) and fp8"},
	} {
		c := Defaults()
		c.Precision, c.Strategy, c.Devices = bad.spec, bad.strategy, 2
		if _, err := Plan(context.Background(), c, func(string) {}); err == nil || !strings.HasSuffix(err.Error(), bad.want) {
			t.Errorf("%s under %s: %v, want %q", bad.spec, bad.strategy, err, bad.want)
		}
	}
}
