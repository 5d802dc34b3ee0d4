package fabric

import (
	"fmt"
	"reflect"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
)

// recomputed is the tape's Recompute for the modules of m that patterns
// select, nil for no patterns; a pattern that selects nothing is an error.
func recomputed(m nn.Module, patterns []string) (func(autograd.Layer) bool, error) {
	if len(patterns) == 0 {
		return nil, nil
	}
	selected := map[any]bool{}
	for _, p := range patterns {
		mods, err := precision.Select(m, p)
		if err != nil {
			return nil, fmt.Errorf("fabric: activation checkpointing %q: %w", p, err)
		}
		for _, mod := range mods {
			selected[mod] = true
		}
	}
	return func(l autograd.Layer) bool { return reflect.TypeOf(l).Comparable() && selected[l] }, nil
}
