package quant

import (
	"math"
	"slices"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/dtype/dynamic"
	"github.com/weftml/weft/tensor"
)

// DefaultBlockSize is the number of elements that share one absmax
// constant in a 4-bit tensor: bitsandbytes' default for weights.
const DefaultBlockSize = 64

// NestedBlockSize is the number of absmax constants that share one float32
// scale under double quantization; bitsandbytes fixes it at 256.
const NestedBlockSize = 256

// Blockwise is a tensor quantized to 4-bit codes, as bitsandbytes'
// quantize_4bit does: its elements, in row-major order, are cut into blocks
// of BlockSize; each block is scaled by the reciprocal of its absmax (its
// largest |x|) and each element replaced by the nearest code of Codebook.
// Element i decodes to Codebook.Value(code i)·absmax(i/BlockSize).
type Blockwise struct {
	Codebook  *Codebook
	BlockSize int
	// Codes holds two codes a byte, element 2i in the high nibble of byte
	// i as bitsandbytes packs them: raw bytes in an int8 tensor of
	// ceil(n/2) elements.
	Codes *tensor.Tensor
	// Absmax holds each block's absmax; nil when Nested holds them.
	Absmax []float32
	// Nested holds the absmax constants quantized to 8 bits (double
	// quantization, the "-dq" modes); nil without.
	Nested *Nested
	shape  []int
}

// Nested is bitsandbytes' double quantization of the absmax constants of
// a Blockwise tensor (quantize_4bit with compress_statistics): their mean
// Offset is subtracted, and the rest is quantized blockwise, NestedBlockSize
// at a time, to the nearest value of bitsandbytes' signed dynamic 8-bit map
// (dynamic.Signed, 256 values in [-0.993, 1]), each scaled by the
// reciprocal of its block's scale as bitsandbytes' reference does. Block
// b's absmax decodes to map[Codes[b]]·Absmax[b/NestedBlockSize] + Offset,
// in float32.
type Nested struct {
	Codes  []uint8   // one per block of the 4-bit tensor
	Absmax []float32 // one per NestedBlockSize codes
	Offset float32
}

// Quantize4 quantizes t to 4-bit codes of cb in blocks of blockSize
// elements, and their absmax constants to 8 bits when double is set. It
// panics unless blockSize is positive. A meta t (tensor.Meta) gives a meta
// Blockwise: its codes are a meta tensor and it holds no constants, but
// Bytes reports what the quantized tensor holds.
func Quantize4(cb *Codebook, t *tensor.Tensor, blockSize int, double bool) *Blockwise {
	n := t.Len()
	numBlocks(n, blockSize) // panics unless blockSize is positive, as the quantization would
	codes := tensor.NewLike(t, dtype.I8, (n+1)/2)
	q := &Blockwise{Codebook: cb, BlockSize: blockSize, Codes: codes, shape: slices.Clone(t.Shape())}
	if t.IsMeta() {
		if double {
			q.Nested = &Nested{} // marks the mode; Bytes counts what it would hold
		}
		return q
	}
	vals := t.Float32s()
	absmax := blockAbsmax(vals, blockSize)
	packed := codes.Data()
	for i, v := range vals {
		// As bitsandbytes' kernels, multiply by the block's reciprocal
		// absmax: a zero block gives NaN, code 0, which decodes to 0.
		c := cb.Encode(v * (1 / absmax[i/blockSize]))
		if i%2 == 0 {
			packed[i/2] = c << 4
		} else {
			packed[i/2] |= c
		}
	}
	if double {
		q.Nested = nest(absmax)
	} else {
		q.Absmax = absmax
	}
	return q
}

// numBlocks is the number of blocks of size elements that n elements
// fill, the last one partly; it panics unless size is positive.
func numBlocks(n, size int) int {
	if size < 1 {
		panic("quant: block size must be positive")
	}
	return (n + size - 1) / size
}

// blockAbsmax returns the largest |v| of each block of size elements of
// vals (NaN for a block holding one, as torch.amax gives).
func blockAbsmax(vals []float32, size int) []float32 {
	out := make([]float32, numBlocks(len(vals), size))
	for i, v := range vals {
		out[i/size] = max(out[i/size], abs(v))
	}
	return out
}

func abs(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// nest double-quantizes absmax. The offset is the mean in float64,
// rounded to float32 (bitsandbytes takes torch.mean in float32).
func nest(absmax []float32) *Nested {
	var sum float64
	for _, a := range absmax {
		sum += float64(a)
	}
	offset := float32(sum / float64(len(absmax)))
	centred := make([]float32, len(absmax))
	for i, a := range absmax {
		centred[i] = a - offset
	}
	scales := blockAbsmax(centred, NestedBlockSize)
	codes := make([]uint8, len(centred))
	for i, v := range centred {
		codes[i] = dynamic.Signed.Nearest(v * (1 / scales[i/NestedBlockSize]))
	}
	return &Nested{Codes: codes, Absmax: scales, Offset: offset}
}

// absmax decodes the absmax constants.
func (n *Nested) absmax() []float32 {
	out := make([]float32, len(n.Codes))
	for i, c := range n.Codes {
		out[i] = dynamic.Signed.Value(c)*n.Absmax[i/NestedBlockSize] + n.Offset
	}
	return out
}

// Absmaxes returns the absmax constant of every block, decoded when
// they are double-quantized.
func (q *Blockwise) Absmaxes() []float32 {
	if q.Nested != nil {
		return q.Nested.absmax()
	}
	return q.Absmax
}

// Dequantize returns the tensor q stands for in dt: each code's value
// times its block's absmax in float32, rounded once to dt, as
// bitsandbytes' dequantize kernel does.
//
// It decodes a block at a time into the pooled result, so that a GEMM's
// dequantization leaves no garbage behind.
func (q *Blockwise) Dequantize(dt dtype.DType) *tensor.Tensor {
	if q.Codes.IsMeta() { // a plan's pass
		return tensor.Meta(dt, q.shape...)
	}
	absmax := q.Absmaxes()
	packed := q.Codes.Data()
	out := tensor.New(dt, q.shape...)
	dst, size := out.Data(), dt.Bits()/8
	n := out.Len()
	block := make([]float32, q.BlockSize)
	for start := 0; start < n; start += q.BlockSize {
		vals := block[:min(q.BlockSize, n-start)]
		scale := absmax[start/q.BlockSize]
		for j := range vals {
			i := start + j
			c := packed[i/2] >> 4
			if i%2 == 1 {
				c = packed[i/2] & 0xf
			}
			vals[j] = q.Codebook.Value(c) * scale
		}
		dtype.Encode(dt, dst[start*size:(start+len(vals))*size], vals, false)
	}
	return out
}

// Bytes returns the memory q holds: the packed codes and the absmax
// constants, with their 8-bit codes, scales and offset when nested. A
// meta q counts the constants that numBlocks says Quantize4 makes.
func (q *Blockwise) Bytes() int {
	if q.Codes.IsMeta() {
		return q.Codes.Bytes() + constantBytes(numBlocks(tensor.Numel(q.shape), q.BlockSize), q.Nested != nil)
	}
	n := q.Codes.Bytes() + 4*len(q.Absmax)
	if q.Nested != nil {
		n += len(q.Nested.Codes) + 4*len(q.Nested.Absmax) + 4
	}
	return n
}

// constantBytes is the memory of the absmax constants of blocks blocks: a
// float32 each, or when nested an 8-bit code each, a float32 scale per
// NestedBlockSize codes and the float32 offset.
func constantBytes(blocks int, nested bool) int {
	if !nested {
		return 4 * blocks
	}
	return blocks + 4*numBlocks(blocks, NestedBlockSize) + 4
}

// Format is the codebook's name, with "-dq" when the constants are nested.
func (q *Blockwise) Format() string {
	if q.Nested != nil {
		return q.Codebook.Name() + "-dq"
	}
	return q.Codebook.Name()
}

// Shape returns the shape of the tensor q stands for.
func (q *Blockwise) Shape() []int { return q.shape }
