package data_test

import (
	"fmt"
	"slices"

	"github.com/weftml/weft/data"
)

// Token ids take the fewest bytes their vocabulary allows: one a token
// for the byte tokenizer's 256, two for GPT-2's 50257.
func ExampleTokensOf() {
	ids := []int{72, 105, 50256}
	small, err := data.TokensOf(256, ids[:2])
	if err != nil {
		fmt.Println(err)
		return
	}
	gpt2, _ := data.TokensOf(50257, ids)
	fmt.Println(small.Width(), small.Bytes(), gpt2.Width(), gpt2.Bytes(), gpt2.Ints())
	_, err = data.TokensOf(256, ids)
	fmt.Println(err)
	// Output:
	// 1 2 2 6 [72 105 50256]
	// data: token id 50256 is outside a vocabulary of 256 ids
}

// A batch is a pure function of its seed and step, so a resumed run reads
// the batches an uninterrupted one would have.
func ExampleGlyphBatch() {
	cfg := data.GlyphConfig{Seed: 7}
	a, again, next := data.GlyphBatch(cfg, 4, 3), data.GlyphBatch(cfg, 4, 3), data.GlyphBatch(cfg, 4, 4)
	fmt.Println(a.X.Shape(), a.Targets, next.Targets)
	fmt.Println(slices.Equal(a.X.Float32s(), again.X.Float32s()), slices.Equal(a.X.Float32s(), next.X.Float32s()))
	// Output:
	// [4 1 12 12] [8 2 8 5] [7 5 3 3]
	// true false
}
