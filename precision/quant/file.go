package quant

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// FileFormats lists the formats QuantizeTensor writes: the 4-bit ones with
// DefaultBlockSize, int8 row-wise, and fp8 (E4M3 with one scale).
var FileFormats = []string{"nf4", "nf4-dq", "fp4", "fp4-dq", "int8", "fp8"}

// entry is the metadata of one quantized tensor, saved as JSON in the
// file's metadata under the tensor's original name.
type entry struct {
	Format    string `json:"format"`
	DType     string `json:"dtype"` // of the original tensor
	Shape     []int  `json:"shape"`
	BlockSize int    `json:"block_size,omitempty"`
}

// QuantizeTensor quantizes t, a tensor saved under name, to format. It
// returns the tensors that replace it and the metadata value describing
// them, to be saved under the key name. Packed codes are raw bytes in an
// int8 tensor (safetensors has no 4-bit type bitsandbytes' packing fits).
// The tensors are, with NAME for name:
//
//	nf4, fp4   NAME.nf4 or NAME.fp4   int8 [ceil(n/2)]  two codes a byte, first in the high nibble
//	           NAME.absmax            float32 [ceil(n/64)]
//	-dq        NAME.absmax            int8 [ceil(n/64)]  8-bit codes of the absmax constants (Nested.Codes)
//	           NAME.nested_absmax     float32 [ceil(n/64/256)]
//	           NAME.nested_offset     float32 []
//	int8       NAME.int8              int8 [rows, cols]  t must be a matrix
//	           NAME.absmax            float32 [rows]
//	fp8        NAME.fp8               float8_e4m3fn, t's shape: t·(448/amax), saturated
//	           NAME.scale             float32 []  amax/448, which dequantizes
func QuantizeTensor(name string, t *tensor.Tensor, format string) ([]checkpoint.Tensor, string, error) {
	e := entry{Format: format, DType: t.DType().String(), Shape: t.Shape()}
	var out []checkpoint.Tensor
	add := func(suffix string, v *tensor.Tensor) {
		out = append(out, checkpoint.Tensor{Name: name + "." + suffix, DType: v.DType(), Shape: v.Shape(), Data: v.Data()})
	}
	switch format {
	case "nf4", "nf4-dq", "fp4", "fp4-dq":
		cb, double := codebook(format)
		q := Quantize4(cb, t, DefaultBlockSize, double)
		e.BlockSize = q.BlockSize
		add(cb.Name(), q.Codes)
		if !double {
			add("absmax", tensor.FromFloat32(q.Absmax, len(q.Absmax)))
			break
		}
		codes, err := tensor.FromBytes(dtype.I8, q.Nested.Codes, len(q.Nested.Codes))
		if err != nil {
			return nil, "", err
		}
		add("absmax", codes)
		add("nested_absmax", tensor.FromFloat32(q.Nested.Absmax, len(q.Nested.Absmax)))
		add("nested_offset", tensor.FromFloat32([]float32{q.Nested.Offset}))
	case "int8":
		if len(t.Shape()) != 2 {
			return nil, "", fmt.Errorf("quant: %s: int8 quantizes matrices row by row, not shape %v", name, t.Shape())
		}
		q, _ := QuantizeRows(t, 0)
		add("int8", q.Codes)
		add("absmax", tensor.FromFloat32(q.Absmax, len(q.Absmax)))
	case "fp8":
		codes, scale := castFP8(t)
		add("fp8", codes)
		add("scale", tensor.FromFloat32([]float32{scale}))
	default:
		return nil, "", fmt.Errorf("quant: format %q is not known; accepted: %s", format, strings.Join(FileFormats, ", "))
	}
	meta, err := json.Marshal(e)
	return out, string(meta), err
}

// codebook returns the codebook of a 4-bit format and whether it is
// double-quantized.
func codebook(format string) (*Codebook, bool) {
	name, double := strings.CutSuffix(format, "-dq")
	if name == NF4.Name() {
		return NF4, double
	}
	return FP4, double
}

// castFP8 casts t to E4M3 with the per-tensor scale of Transformer
// Engine's current scaling, 448/amax (1 for an amax of 0, inf or NaN, at
// most float32's max), saturating, and returns the codes and the scale's
// inverse.
func castFP8(t *tensor.Tensor) (*tensor.Tensor, float32) {
	vals := t.Float32s()
	var amax float32
	for _, v := range vals {
		amax = max(amax, abs(v))
	}
	scale := float32(1)
	if amax > 0 && amax <= math.MaxFloat32 {
		scale = min(float32(dtype.E4M3FN.Max())/amax, math.MaxFloat32)
	}
	for i := range vals {
		vals[i] *= scale
	}
	codes := tensor.New(dtype.E4M3FN, t.Shape()...)
	dtype.Encode(dtype.E4M3FN, codes.Data(), vals, true)
	return codes, 1 / scale
}

// DequantizeTensor returns the tensor that QuantizeTensor saved in f
// under name, dequantized to its original dtype. A file that does not hold
// what the metadata describes is an error.
func DequantizeTensor(f *checkpoint.File, name string) (*tensor.Tensor, error) {
	raw, ok := f.Metadata[name]
	if !ok {
		return nil, fmt.Errorf("quant: the file has no quantized tensor %q", name)
	}
	var e entry
	if err := json.Unmarshal([]byte(raw), &e); err != nil {
		return nil, fmt.Errorf("quant: metadata of %q: %w", name, err)
	}
	dt, err := dtype.Parse(e.DType)
	if err != nil {
		return nil, fmt.Errorf("quant: metadata of %q: %w", name, err)
	}
	r := reader{f: f, name: name, format: e.Format}
	switch e.Format {
	case "nf4", "nf4-dq", "fp4", "fp4-dq":
		cb, double := codebook(e.Format)
		q := &Blockwise{Codebook: cb, BlockSize: e.BlockSize, shape: e.Shape, Codes: r.get(cb.Name(), dtype.I8)}
		if double {
			q.Nested = &Nested{Codes: r.get("absmax", dtype.I8).Data(), Absmax: r.get("nested_absmax", dtype.F32).Float32s(), Offset: r.scalar("nested_offset")}
		} else {
			q.Absmax = r.get("absmax", dtype.F32).Float32s()
		}
		if r.err == nil && !q.consistent() {
			r.err = fmt.Errorf("quant: %s: %d code bytes and the absmax constants do not fit shape %v in blocks of %d", name, q.Codes.Len(), e.Shape, e.BlockSize)
		}
		return dequantized(q, dt, r.err)
	case "int8":
		q := &RowWise{Codes: r.get("int8", dtype.I8), Absmax: r.get("absmax", dtype.F32).Float32s()}
		if r.err == nil && (!slices.Equal(q.Codes.Shape(), e.Shape) || len(e.Shape) != 2 || len(q.Absmax) != e.Shape[0]) {
			r.err = fmt.Errorf("quant: %s: codes %v and %d absmax constants do not fit shape %v", name, q.Codes.Shape(), len(q.Absmax), e.Shape)
		}
		return dequantized(q, dt, r.err)
	case "fp8":
		codes, scale := r.get("fp8", dtype.E4M3FN), r.scalar("scale")
		if r.err != nil {
			return nil, r.err
		}
		return tensor.Scale(codes.To(dtype.F32), float64(scale)).To(dt), nil
	}
	return nil, fmt.Errorf("quant: %s has format %q; known: %s", name, e.Format, strings.Join(FileFormats, ", "))
}

func dequantized(w Weight, dt dtype.DType, err error) (*tensor.Tensor, error) {
	if err != nil {
		return nil, err
	}
	return w.Dequantize(dt), nil
}

// reader reads the tensors of one quantized tensor, keeping the first
// error; after one, it returns empty tensors.
type reader struct {
	f            *checkpoint.File
	name, format string
	err          error
}

func (r *reader) get(suffix string, dt dtype.DType) *tensor.Tensor {
	if r.err == nil {
		st, ok := r.f.Tensor(r.name + "." + suffix)
		if ok && st.DType == dt {
			t, err := tensor.FromBytes(st.DType, st.Data, st.Shape...)
			if r.err = err; err == nil {
				return t
			}
		} else {
			r.err = fmt.Errorf("quant: %s quantized as %s needs a %s tensor %s.%s", r.name, r.format, dt, r.name, suffix)
		}
	}
	return tensor.New(dt, 0)
}

// scalar reads a float32 tensor of one element.
func (r *reader) scalar(suffix string) float32 {
	v := r.get(suffix, dtype.F32).Float32s()
	if len(v) == 1 {
		return v[0]
	}
	if r.err == nil {
		r.err = fmt.Errorf("quant: %s.%s holds %d values, want 1", r.name, suffix, len(v))
	}
	return 0
}

// consistent reports whether q's codes and absmax constants fit its shape
// and block size.
func (q *Blockwise) consistent() bool {
	n := tensor.Numel(q.shape)
	if q.BlockSize < 1 || n < 0 || q.Codes.Len() != (n+1)/2 {
		return false
	}
	blocks := (n + q.BlockSize - 1) / q.BlockSize
	if q.Nested == nil {
		return len(q.Absmax) == blocks
	}
	return len(q.Nested.Codes) == blocks && len(q.Nested.Absmax) == (blocks+NestedBlockSize-1)/NestedBlockSize
}
