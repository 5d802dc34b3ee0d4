package dtype

import (
	"encoding/binary"
	"fmt"
	"math"
)

var le = binary.LittleEndian

// decodeTables maps every code of the 8-bit float formats, and the 16 codes
// of E2M1, to its value: a load is cheaper than any bit manipulation.
var decodeTables = func() (t [numDTypes]*[256]float32) {
	for _, d := range []DType{E4M3FN, E5M2, E4M3FNUZ, E5M2FNUZ, E2M1, E8M0} {
		t[d] = new([256]float32)
		for c := range t[d] {
			t[d][c] = d.Decode(uint32(c))
		}
	}
	return t
}()

// checkLen panics unless storage of size bytes holds n elements of d.
func checkLen(op string, d DType, bytes, n int) {
	if d == Invalid || d >= numDTypes {
		panic("dtype: " + op + " of " + d.String())
	}
	if need := d.StorageBytes(n); bytes < need {
		panic(fmt.Sprintf("dtype: %s %v: %d elements need %d bytes, have %d", op, d, n, need, bytes))
	}
}

// Encode casts src to d into dst, little-endian storage of at least
// d.StorageBytes(len(src)) bytes, with the semantics of DType.Encode. F32 is
// a plain copy of the bits and F64 a widening. Integer formats round to
// nearest even and saturate (quantization, not C truncation); NaN gives 0.
func Encode(d DType, dst []byte, src []float32, sat bool) {
	checkLen("Encode", d, len(dst), len(src))
	lim64 := d.limit(sat)
	lim := float32(lim64)
	switch d {
	case F64:
		for i, x := range src {
			le.PutUint64(dst[8*i:], math.Float64bits(clamp(float64(x), lim64)))
		}
	case F32:
		if nativeLE && !sat {
			copy(dst, asBytes(src))
			return
		}
		for i, x := range src {
			le.PutUint32(dst[4*i:], math.Float32bits(clamp(x, lim)))
		}
	case BF16:
		if nativeLE {
			encodeBF16(asHalves(dst, len(src)), src, lim)
			return
		}
		for i, x := range src {
			le.PutUint16(dst[2*i:], BF16FromF32(clamp(x, lim)))
		}
	case F16:
		if nativeLE {
			encodeF16(asHalves(dst, len(src)), src, lim)
			return
		}
		for i, x := range src {
			le.PutUint16(dst[2*i:], toF16(clamp(x, lim)))
		}
	case E2M1:
		f := minifloats[E2M1]
		for i, x := range src {
			c := byte(f.encode(clamp(x, lim)))
			if i&1 == 0 {
				dst[i/2] = c
			} else {
				dst[i/2] |= c << 4
			}
		}
	case E8M0:
		for i, x := range src {
			dst[i] = byte(encodeE8M0(clamp(x, lim)))
		}
	case I8:
		for i, x := range src {
			dst[i] = byte(roundInt(float64(x), math.MinInt8, math.MaxInt8))
		}
	case I32:
		for i, x := range src {
			le.PutUint32(dst[4*i:], uint32(roundInt(float64(x), math.MinInt32, math.MaxInt32)))
		}
	case I64:
		for i, x := range src {
			le.PutUint64(dst[8*i:], uint64(roundInt(float64(x), math.MinInt64, math.MaxInt64)))
		}
	default: // the 8-bit minifloats
		f := minifloats[d]
		dst = dst[:len(src)]
		for i, x := range src {
			dst[i] = byte(f.encode(clamp(x, lim)))
		}
	}
}

// Decode casts the first len(dst) elements of d stored in src to float32,
// exactly where float32 can hold them: F64 narrows with Go's float32()
// (nearest even) and I32/I64 round to float32 likewise.
func Decode(d DType, dst []float32, src []byte) {
	checkLen("Decode", d, len(src), len(dst))
	switch d {
	case F64:
		for i := range dst {
			dst[i] = float32(math.Float64frombits(le.Uint64(src[8*i:])))
		}
	case F32:
		if nativeLE {
			copy(asBytes(dst), src)
			return
		}
		for i := range dst {
			dst[i] = math.Float32frombits(le.Uint32(src[4*i:]))
		}
	case BF16:
		if nativeLE {
			decodeBF16(dst, asHalves(src, len(dst)))
			return
		}
		for i := range dst {
			dst[i] = F32FromBF16(le.Uint16(src[2*i:]))
		}
	case F16:
		if nativeLE {
			decodeF16(dst, asHalves(src, len(dst)))
			return
		}
		for i := range dst {
			dst[i] = fromF16(le.Uint16(src[2*i:]))
		}
	case E2M1:
		t := decodeTables[E2M1]
		for i := range dst {
			dst[i] = t[src[i/2]>>(4*(i&1))&0xf]
		}
	case I8:
		for i := range dst {
			dst[i] = float32(int8(src[i]))
		}
	case I32:
		for i := range dst {
			dst[i] = float32(int32(le.Uint32(src[4*i:])))
		}
	case I64:
		for i := range dst {
			dst[i] = float32(int64(le.Uint64(src[8*i:])))
		}
	default: // 8-bit floats
		t := decodeTables[d]
		src = src[:len(dst)]
		for i, c := range src {
			dst[i] = t[c]
		}
	}
}

// chunk is the float32 staging size of EncodeF64 and DecodeF64; even, so
// that E2M1 chunks end on a byte boundary.
const chunk = 512

// EncodeF64 casts src to d into dst like Encode. F64 is a plain copy and
// integers are rounded from the float64 directly; the other formats go
// through float32(x) first, as PyTorch converts double to float before a
// lower precision, so a value near a tie may round twice.
func EncodeF64(d DType, dst []byte, src []float64, sat bool) {
	checkLen("EncodeF64", d, len(dst), len(src))
	switch d {
	case F64:
		if nativeLE && !sat {
			copy(dst, asBytes(src))
			return
		}
		lim := d.limit(sat)
		for i, x := range src {
			le.PutUint64(dst[8*i:], math.Float64bits(clamp(x, lim)))
		}
	case I8:
		for i, x := range src {
			dst[i] = byte(roundInt(x, math.MinInt8, math.MaxInt8))
		}
	case I32:
		for i, x := range src {
			le.PutUint32(dst[4*i:], uint32(roundInt(x, math.MinInt32, math.MaxInt32)))
		}
	case I64:
		for i, x := range src {
			le.PutUint64(dst[8*i:], uint64(roundInt(x, math.MinInt64, math.MaxInt64)))
		}
	default:
		var buf [chunk]float32
		for len(src) > 0 {
			n := min(len(src), chunk)
			for i, x := range src[:n] {
				buf[i] = float32(x)
			}
			Encode(d, dst, buf[:n], sat)
			src, dst = src[n:], dst[d.StorageBytes(n):]
		}
	}
}

// DecodeF64 casts the first len(dst) elements of d stored in src to
// float64: exactly, except I64 values beyond 2^53, which round to nearest
// even.
func DecodeF64(d DType, dst []float64, src []byte) {
	checkLen("DecodeF64", d, len(src), len(dst))
	switch d {
	case F64:
		if nativeLE {
			copy(asBytes(dst), src)
			return
		}
		for i := range dst {
			dst[i] = math.Float64frombits(le.Uint64(src[8*i:]))
		}
	case I32:
		for i := range dst {
			dst[i] = float64(int32(le.Uint32(src[4*i:])))
		}
	case I64:
		for i := range dst {
			dst[i] = float64(int64(le.Uint64(src[8*i:])))
		}
	default: // every value of these fits in float32
		var buf [chunk]float32
		for len(dst) > 0 {
			n := min(len(dst), chunk)
			Decode(d, buf[:n], src)
			for i, x := range buf[:n] {
				dst[i] = float64(x)
			}
			dst, src = dst[n:], src[d.StorageBytes(n):]
		}
	}
}
