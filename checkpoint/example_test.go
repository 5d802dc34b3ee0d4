package checkpoint_test

import (
	"bytes"
	"fmt"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/dtype"
)

// A safetensors file round-trips a tensor's dtype, shape and bytes, as
// PyTorch's safetensors reads and writes them.
func ExampleEncodeSafetensors() {
	var buf bytes.Buffer
	w := checkpoint.Tensor{Name: "head.weight", DType: dtype.BF16, Shape: []int{2}, Data: []byte{0x80, 0x3f, 0x00, 0xc0}} // 1, -2
	if err := checkpoint.EncodeSafetensors(&buf, []checkpoint.Tensor{w}, map[string]string{"format": "pt"}); err != nil {
		fmt.Println(err)
		return
	}
	f, err := checkpoint.ParseSafetensors(buf.Bytes())
	if err != nil {
		fmt.Println(err)
		return
	}
	t, _ := f.Tensor("head.weight")
	vals := make([]float32, 2)
	dtype.Decode(t.DType, vals, t.Data)
	fmt.Println(f.Names(), t.DType, t.Shape, vals, f.Metadata["format"])
	// Output: [head.weight] bfloat16 [2] [1 -2] pt
}

// Parsing treats a file as untrusted: a header that claims more bytes than
// the file holds is an error, not a panic.
func ExampleParseSafetensors() {
	_, err := checkpoint.ParseSafetensors([]byte{0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'})
	fmt.Println(err)
	// Output: safetensors: header size 65535 exceeds the 2 bytes that follow it
}
