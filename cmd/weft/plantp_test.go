package main

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/weftml/weft/fabric"
)

// TestPlanTensorParallel: weft plan --tp 2 shows each split Linear's
// layout and share, and a rank's parameter bytes are the whole model's
// less half of every split tensor (the weights and the column-parallel
// biases), which it lists.
func TestPlanTensorParallel(t *testing.T) {
	total := func(args ...string) int64 {
		out, code := run(append([]string{"plan", "--model", "gpt", "--json"}, args...)...)
		if code != 0 {
			t.Fatal(out)
		}
		var p struct {
			BytesPerRank struct{ Params int64 } `json:"bytes_per_rank"`
		}
		if err := json.Unmarshal([]byte(out), &p); err != nil || p.BytesPerRank.Params == 0 {
			t.Fatalf("%v in %s", err, out)
		}
		return p.BytesPerRank.Params
	}
	whole, half := total(), total("--tp", "2", "--devices", "2")
	out, code := run("plan", "--model", "gpt", "--tp", "2", "--devices", "2")
	if code != 0 {
		t.Fatal(out)
	}
	var lines []string // with single spaces
	for _, l := range strings.Split(out, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	out = strings.Join(lines, "\n")
	for _, want := range []string{"\nblocks.0.qkv column [192 64] [96 64] 24576\n", "\nblocks.1.out row [64 256] [64 128] 32768\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	// Half of each split weight (its share's bytes) and of qkv's and fc's
	// float32 biases (3·64 and 4·64 elements) in each of the 2 layers.
	var saved int64
	for _, m := range regexp.MustCompile(`(?m)^blocks\.\d+\.\w+ (?:column|row) \[\d+ \d+\] \[\d+ \d+\] (\d+)$`).FindAllStringSubmatch(out, -1) {
		b, _ := strconv.ParseInt(m[1], 10, 64)
		saved += b
	}
	saved += 2 * (3*64 + 4*64) * 4 / 2
	if whole-half != saved {
		t.Errorf("a tp 2 rank holds %d parameter bytes, the whole model %d: %d saved, want %d", half, whole, whole-half, saved)
	}
}

// TestPlanSequenceParallel: weft plan --tp 2 --sequence-parallel lists the
// modules that run on shares of the sequence with their layouts, and
// predicts a lower peak than the same mesh without it (the norms' and
// residual stream's activations are halved).
func TestPlanSequenceParallel(t *testing.T) {
	peak := func(args ...string) float64 {
		out, code := run(append([]string{"plan", "--model", "gpt", "--tp", "2", "--devices", "2", "--batch-size", "64", "--json"}, args...)...)
		if code != 0 {
			t.Fatal(out)
		}
		var p struct {
			Peak struct{ Bytes float64 } `json:"peak_per_rank"`
		}
		if err := json.Unmarshal([]byte(out), &p); err != nil || p.Peak.Bytes == 0 {
			t.Fatalf("%v in %s", err, out)
		}
		return p.Peak.Bytes
	}
	if tp, sp := peak(), peak("--sequence-parallel"); sp >= tp {
		t.Errorf("predicted peak %g bytes with sequence parallelism, %g without", sp, tp)
	}
	out, code := run("plan", "--model", "gpt", "--tp", "2", "--devices", "2", "--sequence-parallel")
	if code != 0 {
		t.Fatal(out)
	}
	out = strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"blocks.0.ln1 sequence ", "ln_f sequence, gathered ", "tok scattered to the sequence ", "blocks.0.qkv column [192 64] [96 64] 24576 ", "sequence parallel: per step, each rank reduce-scatters"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
}

// TestPlanRanksPerHost: weft plan --ranks-per-host splits each rank's
// traffic between its host and the others as mpirun would place the
// ranks: fsdp on 2 hosts of 2 sends two thirds of its gathers and
// reductions to the other host, hsdp a third of that; a count that splits
// a mesh row or does not divide the ranks is refused.
func TestPlanRanksPerHost(t *testing.T) {
	traffic := func(args ...string) (inside, between int64) {
		out, code := run(append([]string{"plan", "--json", "--devices", "4", "--precision", "32-true"}, args...)...)
		if code != 0 {
			t.Fatal(out)
		}
		var p struct {
			Traffic fabric.Traffic `json:"traffic_per_step"`
		}
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatalf("%v in %s", err, out)
		}
		return p.Traffic.InsideHost, p.Traffic.BetweenHosts
	}
	if in, between := traffic("--strategy", "fsdp"); between != 0 || in == 0 {
		t.Errorf("fsdp on one host: %d bytes inside it, %d between hosts", in, between)
	}
	in, fsdp := traffic("--strategy", "fsdp", "--ranks-per-host", "2")
	if d := fsdp - 2*in; max(d, -d) > fsdp/100 {
		t.Errorf("fsdp on 2 hosts of 2: %d bytes inside a host, %d between; want twice as many between", in, fsdp)
	}
	if _, hsdp := traffic("--strategy", "hsdp", "--shard-size", "2", "--ranks-per-host", "2"); max(3*hsdp-fsdp, fsdp-3*hsdp) > fsdp/100 {
		t.Errorf("between 2 hosts of 2, hsdp sends %d bytes, fsdp %d; want a third", hsdp, fsdp)
	}
	for _, args := range [][]string{{"--ranks-per-host", "3"}, {"--tp", "2", "--ranks-per-host", "1"}} {
		out, code := run(append([]string{"plan", "--strategy", "fsdp", "--devices", "4"}, args...)...)
		if code == 0 || !strings.Contains(out, "--ranks-per-host") {
			t.Errorf("%v: exit %d, %q", args, code, out)
		}
	}
}
