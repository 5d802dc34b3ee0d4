package gemm

import (
	"fmt"
	"unsafe"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/vec"
)

// epilogue is a call's Epilogue, as a part of it sees it: element (i, j)
// of the part's C is column j of Bias and element i·ldo+j of Out.
type epilogue[T float] struct {
	Epilogue[T]
	ldo int // elements between rows of Out: the whole call's n
}

// newEpilogue returns ep for a call whose C is m×n, panicking if ep does
// not fit it.
func newEpilogue[T float](ep Epilogue[T], m, n int) epilogue[T] {
	e := epilogue[T]{Epilogue: ep, ldo: n}
	if ep.Bias != nil && len(ep.Bias) < n {
		panic(fmt.Sprintf("gemm: bias has %d elements, want >= %d", len(ep.Bias), n))
	}
	if ep.Out != nil {
		if !ep.OutDType.IsFloat() || ep.OutDType.Bits()%8 != 0 {
			panic(fmt.Sprintf("gemm: epilogue output dtype %v, want a float format of whole bytes", ep.OutDType))
		}
		if want := ep.OutDType.StorageBytes(m * n); len(ep.Out) < want {
			panic(fmt.Sprintf("gemm: epilogue output has %d bytes, want >= %d", len(ep.Out), want))
		}
	}
	if ep.Round != dtype.Invalid {
		var z T
		if _, ok := any(z).(float32); !ok || ep.Out != nil || ep.GELU != nil || !ep.Round.IsFloat() || ep.Round.Bits() >= 32 {
			panic(fmt.Sprintf("gemm: epilogue rounding to %v needs float32 sums without Out or GELU, and a float dtype narrower than float32", ep.Round))
		}
	}
	if ep.GELU != nil {
		var z T
		if _, ok := any(z).(float32); !ok {
			panic("gemm: a GELU epilogue needs float32 sums")
		}
		if want := e.yDType().StorageBytes(m * n); len(ep.GELU) < want {
			panic(fmt.Sprintf("gemm: GELU epilogue has %d bytes, want %d", len(ep.GELU), want))
		}
	}
	return e
}

// from returns the epilogue of the part of C from row i and column j on.
func (e epilogue[T]) from(i, j int) epilogue[T] {
	if e.Bias != nil {
		e.Bias = e.Bias[j:]
	}
	if e.Out != nil {
		e.Out = e.Out[e.OutDType.StorageBytes(i*e.ldo+j):]
	}
	if e.GELU != nil {
		e.GELU = e.GELU[e.yDType().StorageBytes(i*e.ldo+j):]
	}
	return e
}

// yDType is the dtype of GELU's results.
func (e *epilogue[T]) yDType() dtype.DType {
	if e.Out != nil {
		return e.OutDType
	}
	return dtype.F32
}

// apply runs the epilogue on the finished h×w block of C at c (row stride
// ldc), which is element (i, j) of the part's C.
func (e *epilogue[T]) apply(c []T, ldc, i, j, h, w int) {
	if e.Bias == nil && e.Out == nil && e.GELU == nil && e.Round == dtype.Invalid {
		return
	}
	for r := range h {
		row, at := c[r*ldc:][:w], (i+r)*e.ldo+j
		if e.Bias != nil {
			vec.Add(row, e.Bias[j:j+w])
		}
		if e.Round != dtype.Invalid {
			dtype.RoundFloat32s(e.Round, any(row).([]float32))
		}
		if e.Out != nil {
			out := e.Out[e.OutDType.StorageBytes(at):][:e.OutDType.StorageBytes(w)]
			switch row := any(row).(type) {
			case []float32:
				dtype.Encode(e.OutDType, out, row, false)
				if e.GELU != nil {
					dtype.Decode(e.OutDType, row, out) // what GELU reads back
				}
			case []float64:
				dtype.EncodeF64(e.OutDType, out, row, false)
			}
		}
		if e.GELU != nil {
			e.gelu(any(row).([]float32), at)
		}
	}
}

// gelu runs the GELU on x, a row of C as rounded, which is element at of
// the part's C: into GELU directly when it is float32, else through x (the
// scratch C) and rounded from there. Φ(x), which vec.GELU also gives, goes
// to a block on the stack: backward computes it again.
func (e *epilogue[T]) gelu(x []float32, at int) {
	ydt := e.yDType()
	y := e.GELU[ydt.StorageBytes(at):][:ydt.StorageBytes(len(x))]
	var cdf [geluBlock]float32
	for lo := 0; lo < len(x); lo += geluBlock {
		hi := min(lo+geluBlock, len(x))
		if ydt == dtype.F32 {
			out := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(y))), len(x))
			vec.GELU(out[lo:hi], cdf[:hi-lo], x[lo:hi])
		} else {
			vec.GELU(x[lo:hi], cdf[:hi-lo], x[lo:hi])
		}
	}
	if ydt != dtype.F32 {
		dtype.Encode(ydt, y, x, false)
	}
}

// geluBlock is the elements gelu passes vec.GELU at a time.
const geluBlock = 256
