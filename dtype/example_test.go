package dtype_test

import (
	"fmt"

	"github.com/weftml/weft/dtype"
)

// Rounding to a format is PyTorch's: to nearest, ties to even. 1+2⁻⁸ lies
// halfway between the bfloat16 neighbours 1 and 1+2⁻⁷ and goes to the
// even one; float16 holds it exactly.
func ExampleDType_Round() {
	x := float32(1 + 1.0/256)
	fmt.Println(dtype.BF16.Round(x), dtype.F16.Round(x))
	// Output: 1 1.0039062
}

// FP8 casts choose how they overflow: saturating to the format's largest
// finite value, as Transformer Engine's scaled casts do, or not (E4M3 has
// no infinity, so it overflows to NaN).
func ExampleDType_RoundSat() {
	fmt.Println(dtype.E4M3FN.Max(), dtype.E4M3FN.RoundSat(1000), dtype.E4M3FN.Round(1000))
	// Output: 448 448 NaN
}

// Encode packs values into a format's storage bytes; a 4-bit format packs
// two values a byte.
func ExampleEncode() {
	vals := []float32{0.5, -1.5, 3, 6}
	codes := make([]byte, dtype.E2M1.StorageBytes(len(vals)))
	dtype.Encode(dtype.E2M1, codes, vals, true)
	back := make([]float32, len(vals))
	dtype.Decode(dtype.E2M1, back, codes)
	fmt.Println(len(codes), back)
	// Output: 2 [0.5 -1.5 3 6]
}
