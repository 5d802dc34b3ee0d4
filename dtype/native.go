package dtype

import (
	"encoding/binary"
	"unsafe"
)

// nativeLE reports whether this machine stores numbers little-endian, as
// tensor storage does: then float32 and float64 storage is the machine's own
// representation and copies need no per-element conversion.
var nativeLE = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// asBytes views a float slice as its bytes.
func asBytes[T float32 | float64](s []T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(T(0))))
}
