package parity

import (
	"regexp"
	"strings"
	"testing"
)

// TestNonFinite: "16-true" on the reference MLP diverges at step 1, because
// AdamW's eps is 0 in float16, and the fabric says so.
func TestNonFinite(t *testing.T) {
	ref, _ := loadReference(t)
	res, err := Train(ref, "mlp", 3, mustSpec(t, "32-true"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.NonFinite != "" {
		t.Errorf("32-true: finite run reported %q", res.NonFinite)
	}

	res, err = Train(ref, "mlp", 3, mustSpec(t, "16-true"), nil)
	if err != nil {
		t.Fatal(err)
	}
	msg := res.NonFinite
	if msg == "" {
		t.Fatalf("16-true: losses %v, but NonFinite() is nil", res.Losses)
	}
	if !regexp.MustCompile(`\bstep 1\b`).MatchString(msg) {
		t.Errorf("16-true: NonFinite does not name step 1: %s", msg)
	}
	for _, want := range []string{"eps", "float16"} {
		if !strings.Contains(msg, want) {
			t.Errorf("16-true: NonFinite does not mention %s: %s", want, msg)
		}
	}
}
