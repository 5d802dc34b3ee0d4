package tensor_test

import (
	"fmt"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// A tensor's bytes are its storage dtype's: converted to bfloat16, four
// values take 8 bytes and read back rounded.
func ExampleTensor_To() {
	x := tensor.FromFloat32([]float32{1, 1.001, 3.14159, 1e-3}, 2, 2)
	b := x.To(dtype.BF16)
	fmt.Println(b.DType(), b.Shape(), b.Bytes(), b.Float32s())
	// Output: bfloat16 [2 2] 8 [1 1 3.140625 0.0009994507]
}

// A bfloat16 GEMM multiplies as a tensor core does: exact products,
// float32 sums, one rounding of each result to bfloat16 (257 and 770 have
// none: 256 and 768 are the nearest). In float32 the same inputs give the
// exact sums.
func ExampleMatMul() {
	a := tensor.FromFloat32([]float32{1, 2, 3, 4}, 2, 2)
	b := tensor.FromFloat32([]float32{256, 0, 0.5, 1}, 2, 2)
	fmt.Println(tensor.MatMul(a, b, false, false).Float32s())
	c := tensor.MatMul(a.To(dtype.BF16), b.To(dtype.BF16), false, false)
	fmt.Println(c.DType(), c.Float32s())
	// Output:
	// [257 2 770 4]
	// bfloat16 [256 2 768 4]
}
