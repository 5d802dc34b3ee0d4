package comm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/weftml/weft/dtype"
)

// Reduce sets dst to the reduction of srcs, element by element and in the
// order given. For each element i it computes
//
//	acc := decode(srcs[0][i])
//	for _, s := range srcs[1:] {
//		acc = op(acc, decode(s[i]))
//	}
//	dst[i] = encode(acc)
//
// in float32 (float64 for F64; int64 for the integer formats, which wrap on
// overflow like two's-complement hardware), and encode rounds once to dt,
// to nearest even and without saturating, so an overflow shows up as inf or
// NaN where the loss scaler's check will see it. A single source is copied
// unchanged. Backends reduce with Reduce, passing ranks in rank order, so a
// result does not depend on the backend or on how it splits the work.
//
// All buffers must have the same length, a whole number of dt elements.
// dst may be one of srcs but must not otherwise overlap them.
func Reduce(dt dtype.DType, op Op, dst []byte, srcs ...[]byte) error {
	if err := checkReduce(dt, op, len(dst)); err != nil {
		return fmt.Errorf("comm: reduce: %w", err)
	}
	if len(srcs) == 0 {
		return errors.New("comm: reduce: no sources")
	}
	for i, s := range srcs {
		if len(s) != len(dst) {
			return fmt.Errorf("comm: reduce: source %d has %d bytes, dst %d", i, len(s), len(dst))
		}
	}
	switch {
	case len(srcs) == 1:
		copy(dst, srcs[0])
	case dt == dtype.F64:
		reduce(dt, op, dst, srcs, load[float64], store[float64])
	case dt == dtype.F32:
		reduce(dt, op, dst, srcs, load[float32], store[float32])
	case dt.IsFloat():
		reduce(dt, op, dst, srcs, dtype.Decode, func(dt dtype.DType, dst []byte, src []float32) {
			dtype.Encode(dt, dst, src, false)
		})
	default:
		reduce(dt, op, dst, srcs, decodeInt, encodeInt)
	}
	return nil
}

// block is the number of elements Reduce stages at a time: small enough
// that the accumulator stays in L1.
const block = 512

// reduce is Reduce for one accumulator type, block by block; block is even,
// so E2M1's blocks start on a byte.
func reduce[T float32 | float64 | int64](dt dtype.DType, op Op, dst []byte, srcs [][]byte,
	decode func(dtype.DType, []T, []byte), encode func(dtype.DType, []byte, []T)) {
	var acc, x [block]T
	n := len(dst) * 8 / dt.Bits()
	for lo := 0; lo < n; lo += block {
		m := min(block, n-lo)
		b0, b1 := dt.StorageBytes(lo), dt.StorageBytes(lo+m)
		decode(dt, acc[:m], srcs[0][b0:b1])
		for _, s := range srcs[1:] {
			decode(dt, x[:m], s[b0:b1])
			combine(op, acc[:m], x[:m])
		}
		encode(dt, dst[b0:b1], acc[:m])
	}
}

// combine sets acc[i] = op(acc[i], x[i]). The builtin min and max return
// NaN if either operand is NaN.
func combine[T float32 | float64 | int64](op Op, acc, x []T) {
	x = x[:len(acc)]
	switch op {
	case Sum:
		for i := range acc {
			acc[i] += x[i]
		}
	case Max:
		for i := range acc {
			acc[i] = max(acc[i], x[i])
		}
	case Min:
		for i := range acc {
			acc[i] = min(acc[i], x[i])
		}
	}
}

// load and store move F32 and F64 elements as they are, which is what
// decoding and encoding them without saturation amount to. Like package
// tensor, they assume a little-endian machine.
func load[T float32 | float64](_ dtype.DType, dst []T, src []byte)  { copy(bytesOf(dst), src) }
func store[T float32 | float64](_ dtype.DType, dst []byte, src []T) { copy(dst, bytesOf(src)) }

func bytesOf[T float32 | float64](s []T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(T(0))))
}

var le = binary.LittleEndian

// decodeInt widens the integer elements of src to int64.
func decodeInt(dt dtype.DType, dst []int64, src []byte) {
	switch dt {
	case dtype.I8:
		for i := range dst {
			dst[i] = int64(int8(src[i]))
		}
	case dtype.I32:
		for i := range dst {
			dst[i] = int64(int32(le.Uint32(src[4*i:])))
		}
	default:
		for i := range dst {
			dst[i] = int64(le.Uint64(src[8*i:]))
		}
	}
}

// encodeInt truncates src to dt's width, which gives the wrapped result of
// adding in dt itself.
func encodeInt(dt dtype.DType, dst []byte, src []int64) {
	switch dt {
	case dtype.I8:
		for i, v := range src {
			dst[i] = byte(v)
		}
	case dtype.I32:
		for i, v := range src {
			le.PutUint32(dst[4*i:], uint32(v))
		}
	default:
		for i, v := range src {
			le.PutUint64(dst[8*i:], uint64(v))
		}
	}
}
