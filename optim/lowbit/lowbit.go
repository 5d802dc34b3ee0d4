// Package lowbit holds the formats low-bit optimizers keep Adam's moments
// in: each moment as codes, one to four bits of them a element, and one
// float32 scale a block of elements. A step decodes both moments to
// float32, updates them and the parameter, and encodes them again with
// each block's new scale.
package lowbit

import (
	"fmt"
	"math"
	"sort"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/dtype/dynamic"
)

// Format is one way of keeping AdamW's moments in low precision.
type Format struct {
	// Name is the precision spec that asks for it ("adamw8bit").
	Name string
	// Moments says what a moment's element is ("8-bit moments").
	Moments string
	// Block is the number of elements that share a scale.
	Block int
	// CodeDType is the dtype of the tensors of codes: int8 for codes of a
	// map (raw bytes), float8_e4m3fn for FP8 values.
	CodeDType dtype.DType
	// PerByte is the number of elements a byte of codes holds: 1, or 2 for
	// 4-bit codes, packed as torchao packs them (element 2i in the high
	// nibble of byte i; an odd count leaves the last low nibble 0).
	PerByte int
	// Scale names the scales in a checkpoint (".exp_avg_absmax"):
	// "absmax" (bitsandbytes) or "scale" (torchao).
	Scale string
	// Torchao says the step is torchao's single_param_adam, all in
	// float32 (tensor.TorchaoScalars), rather than PyTorch's AdamW.
	Torchao bool
	// M and V encode the first and the second moment.
	M, V Codec
}

// Codec turns float32 moments into codes and a scale a block, and back.
type Codec interface {
	// Encode writes the codes of x to codes (CodeBytes(len(x)) bytes)
	// and the scale of each block to scales.
	Encode(x []float32, codes []byte, scales []float32)
	// Decode writes to out the values of its len(out) elements' codes.
	Decode(codes []byte, scales []float32, out []float32)
	// Zero is the byte of codes a fresh moment holds, with scales 0.
	Zero() byte
}

func (f *Format) String() string { return fmt.Sprintf("%s in blocks of %d", f.Moments, f.Block) }

// CodeShape is the shape of the codes of a moment of a tensor of shape:
// the tensor's, or [CodeBytes(n)] for packed codes.
func (f *Format) CodeShape(shape []int) []int {
	if f.PerByte == 1 {
		return shape
	}
	n := 1
	for _, d := range shape {
		n *= d
	}
	return []int{f.CodeBytes(n)}
}

// CodeBytes is the number of bytes of codes of n elements.
func (f *Format) CodeBytes(n int) int { return (n + f.PerByte - 1) / f.PerByte }

// Blocks is the number of scales of n elements, the last block partly full.
func (f *Format) Blocks(n int) int { return dynamic.Blocks(n, f.Block) }

// Bytes is the memory of one moment of n elements: codes and scales.
func (f *Format) Bytes(n int) int64 { return int64(f.CodeBytes(n) + 4*f.Blocks(n)) }

// AdamW8bit is bitsandbytes' AdamW8bit: m as codes of dynamic.Signed, v
// of dynamic.Unsigned, a byte each, and a float32 absmax a block of 256
// (dynamic.Quantize), stepped as PyTorch's AdamW.
var AdamW8bit = &Format{
	Name: "adamw8bit", Moments: "8-bit moments", Block: dynamic.BlockSize, CodeDType: dtype.I8, PerByte: 1, Scale: "absmax",
	M: dynamicCodec{dynamic.Signed, dynamic.BlockSize}, V: dynamicCodec{dynamic.Unsigned, dynamic.BlockSize},
}

// AdamW4bit is torchao's AdamW4bit (optim/subclass_4bit.py): blocks of 128
// scaled by their absmax clipped to 1e-12, m coded by the 16 values of
// create_dynamic_map(signed=True, 3, 4) (dynamic.Values(true, 3)), v by
// the 16 of torch.linspace(0, 1, 17)[1:] (no zero), each the nearest by
// torchao's rule (Map.Code), two codes a byte.
var AdamW4bit = &Format{
	Name: "adamw4bit", Moments: "4-bit moments", Block: 128, CodeDType: dtype.I8, PerByte: 2, Scale: "scale", Torchao: true,
	M: mapCodec{newMap(dynamic.Values(true, 3)), 128}, V: mapCodec{newMap(linear16()), 128},
}

// AdamWFp8 is torchao's AdamWFp8 (optim/subclass_fp8.py): both moments as
// float8_e4m3fn values with a float32 scale a block of 256, the block's
// absmax clipped to 1e-12 over 448; x is stored as e4m3fn(x/scale),
// rounded to nearest even, and read back as its value times the scale.
var AdamWFp8 = &Format{
	Name: "adamwfp8", Moments: "float8_e4m3fn moments", Block: 256, CodeDType: dtype.E4M3FN, PerByte: 1, Scale: "scale", Torchao: true,
	M: fp8Codec{256}, V: fp8Codec{256},
}

// dynamicCodec is bitsandbytes' blockwise quantization to a dynamic map.
type dynamicCodec struct {
	m     *dynamic.Map
	block int
}

func (c dynamicCodec) Encode(x []float32, codes []byte, scales []float32) {
	dynamic.Quantize(c.m, x, c.block, codes, scales)
}

func (c dynamicCodec) Decode(codes []byte, scales []float32, out []float32) {
	dynamic.Dequantize(c.m, codes[:len(out)], scales, c.block, out)
}

func (c dynamicCodec) Zero() byte { return c.m.Nearest(0) }

// minScale is torchao's clip of a block's absmax (scale_tensor,
// quantize_fp8): an all-zero block divides by it, not by 0.
const minScale float32 = 1e-12

// Map is the 16 values of a torchao 4-bit map, sorted.
type Map [16]float32

func newMap(vals []float32) *Map {
	var m Map
	copy(m[:], vals)
	return &m
}

// linear16 is torch.linspace(0, 1, 17)[1:]: k/16 for k = 1..16, exact.
func linear16() []float32 {
	out := make([]float32, 16)
	for k := range out {
		out[k] = float32(k+1) / 16
	}
	return out
}

// Code is torchao's quantize_4bit_with_qmap: the largest code whose value
// is at most x (code 0 below the map and for NaN), moved up to the next
// when x - its value >= half the step between them, in float32 (a tie
// goes up).
func (m *Map) Code(x float32) byte {
	c := sort.Search(16, func(i int) bool { return m[i] > x }) - 1 // NaN: 15, undone below
	if c < 0 || x != x {
		return 0
	}
	up := min(c+1, 15)
	if x-m[c] >= (m[up]-m[c])*0.5 {
		return byte(up)
	}
	return byte(c)
}

// mapCodec is torchao's 4-bit blockwise quantization to a map.
type mapCodec struct {
	m     *Map
	block int
}

// blockScales writes to scales each block's absmax clipped to minScale
// (torch.amax: NaN for a block holding one).
func blockScales(x []float32, block int, scales []float32) {
	for b := range dynamic.Blocks(len(x), block) {
		var amax float32
		for _, v := range x[b*block : min((b+1)*block, len(x))] {
			a := float32(math.Abs(float64(v)))
			if a > amax || a != a {
				amax = a
			}
			if amax != amax {
				break
			}
		}
		scales[b] = max(amax, minScale) // max keeps NaN, as clip does
	}
}

func (c mapCodec) Encode(x []float32, codes []byte, scales []float32) {
	blockScales(x, c.block, scales)
	codes = codes[:(len(x)+1)/2]
	clear(codes)
	for i, v := range x {
		code := c.m.Code(v / scales[i/c.block])
		if i%2 == 0 {
			codes[i/2] = code << 4
		} else {
			codes[i/2] |= code
		}
	}
}

func (c mapCodec) Decode(codes []byte, scales []float32, out []float32) {
	for i := range out {
		code := codes[i/2] >> 4
		if i%2 == 1 {
			code = codes[i/2] & 0xf
		}
		out[i] = c.m[code] * scales[i/c.block]
	}
}

func (mapCodec) Zero() byte { return 0 }

// fp8Codec is torchao's blockwise quantization to float8_e4m3fn.
type fp8Codec struct{ block int }

func (c fp8Codec) Encode(x []float32, codes []byte, scales []float32) {
	blockScales(x, c.block, scales)
	for b := range scales[:dynamic.Blocks(len(x), c.block)] {
		scales[b] /= 448
	}
	for i, v := range x {
		codes[i] = byte(dtype.E4M3FN.Encode(v/scales[i/c.block], false))
	}
}

func (c fp8Codec) Decode(codes []byte, scales []float32, out []float32) {
	for i := range out {
		out[i] = dtype.E4M3FN.Decode(uint32(codes[i])) * scales[i/c.block]
	}
}

func (fp8Codec) Zero() byte { return 0 }
