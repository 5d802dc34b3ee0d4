package gemm

import (
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/vec"
)

// epilogue is a call's Epilogue, as a part of it sees it: element (i, j)
// of the part's C is column j of Bias and element i·ldo+j of Out.
type epilogue[T float] struct {
	Epilogue[T]
	ldo int // elements between rows of Out: the whole call's n
}

// from returns the epilogue of the part of C from row i and column j on.
func (e epilogue[T]) from(i, j int) epilogue[T] {
	if e.Bias != nil {
		e.Bias = e.Bias[j:]
	}
	if e.Out != nil {
		e.Out = e.Out[e.OutDType.StorageBytes(i*e.ldo+j):]
	}
	return e
}

// apply runs the epilogue on the finished h×w block of C at c (row stride
// ldc), which is element (i, j) of the part's C.
func (e *epilogue[T]) apply(c []T, ldc, i, j, h, w int) {
	if e.Bias == nil && e.Out == nil {
		return
	}
	for r := range h {
		row := c[r*ldc:][:w]
		if e.Bias != nil {
			vec.Add(row, e.Bias[j:j+w])
		}
		if e.Out != nil {
			out := e.Out[e.OutDType.StorageBytes((i+r)*e.ldo+j):]
			switch row := any(row).(type) {
			case []float32:
				dtype.Encode(e.OutDType, out, row, false)
			case []float64:
				dtype.EncodeF64(e.OutDType, out, row, false)
			}
		}
	}
}
