package comm

import (
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// A Codec sends one parameter's FSDP all-gather as codes that its owner
// (a block-scaled FP8 or FP4 recipe) casts and computes with itself: each
// block of the parameter is cast with a scale from its amax, so the ranks
// first agree on every block's amax (a chunk may hold part of a block),
// then each casts its chunk and the codes are gathered. The result equals
// the cast of the whole parameter on one rank, bit for bit.
type Codec interface {
	// DType is the codes' dtype.
	DType() dtype.DType
	// Parts is how many casts of the parameter travel (a matrix read
	// along its rows by one GEMM and down its columns by the next is cast
	// once for each), each as many codes as the parameter has elements.
	Parts() int
	// Amaxes returns the largest |v| that chunk, the parameter's
	// elements from offset on, holds of every block (0 for a block it
	// holds none of); every rank's slice is as long.
	Amaxes(chunk *tensor.Tensor, offset int) []float32
	// Encode casts chunk, from offset, with the scales of the amaxes
	// agreed over ranks: one tensor of DType per part.
	Encode(chunk *tensor.Tensor, offset int, amaxes []float32) []*tensor.Tensor
	// Use hands the owner the gathered codes of each part, padded wholes
	// of which the first elements are the parameter's, and the agreed
	// amaxes; the caller frees the codes after it returns.
	Use(codes []*tensor.Tensor, amaxes []float32)
}
