package models

import (
	"strings"
	"testing"

	"github.com/weftml/weft/nn"
)

// TestRegistry: the models register themselves; a lookup of another name
// lists them, a model without a plan names those with one, and a second
// registration of a name panics at start-up instead of replacing the model.
func TestRegistry(t *testing.T) {
	if got := strings.Join(Names(), ","); got != "bigram,cnn,gpt,hybrid,llama,mlp,mlp784" {
		t.Errorf("registered %s", got)
	}
	if _, err := Lookup("gtp"); err == nil || !strings.Contains(err.Error(), `unknown model "gtp" (accepted: bigram, cnn, gpt,`) {
		t.Errorf("an unknown model: %v", err)
	}
	if _, err := TensorPlan("bigram", false); err == nil || !strings.Contains(err.Error(), "models with one: gpt, hybrid, llama") {
		t.Errorf("bigram's tensor-parallel plan: %v", err)
	}
	if _, err := TensorPlan("hybrid", true); err == nil || !strings.Contains(err.Error(), "no sequence-parallel plan (models with one: gpt, llama)") {
		t.Errorf("hybrid's sequence-parallel plan: %v", err)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "twice for model gpt") {
			t.Errorf("registering gpt again: %v", r)
		}
	}()
	Register(Spec{Name: "gpt", New: func(init *nn.Init) Model { return NewMLP(init) }})
}
