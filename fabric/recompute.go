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
	selected, err := precision.Select(m, patterns)
	if err != nil {
		return nil, fmt.Errorf("fabric: activation checkpointing %w", err)
	}
	return func(l autograd.Layer) bool {
		m, ok := l.(nn.Module)
		return ok && reflect.TypeOf(l).Comparable() && selected[m]
	}, nil
}
