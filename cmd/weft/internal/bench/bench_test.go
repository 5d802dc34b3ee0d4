package bench

import (
	"context"
	"testing"
)

// BenchmarkStep times one training step of each model `weft bench step`
// measures, reporting allocations per step.
func BenchmarkStep(b *testing.B) {
	for _, model := range []string{"mlp784", "mlp", "cnn", "gpt"} {
		for _, spec := range []string{"32-true", "bf16-mixed"} {
			b.Run(model+"/"+spec, func(b *testing.B) {
				s, err := newStep(context.Background(), StepConfig{Model: model}, mustParse(b, spec))
				if err != nil {
					b.Fatal(err)
				}
				for range 3 {
					if err := s.run(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				for b.Loop() {
					if err := s.run(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
