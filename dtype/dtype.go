// Package dtype defines weft's number formats and bit-exact casts between
// them and float32, matching PyTorch (and ml_dtypes for the formats PyTorch
// lacks): round to nearest, ties to even, with an explicit choice between
// saturating and non-saturating overflow.
package dtype

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// DType is a storage format for tensor elements.
type DType uint8

const (
	Invalid  DType = iota // the zero value: no format
	F64                   // float64
	F32                   // float32
	F16                   // IEEE half
	BF16                  // bfloat16
	E4M3FN                // float8_e4m3fn: no inf, NaN = 0x7f/0xff, max 448
	E5M2                  // float8_e5m2: IEEE-like, max 57344
	E4M3FNUZ              // float8_e4m3fnuz: NaN = 0x80, no -0, max 240
	E5M2FNUZ              // float8_e5m2fnuz: NaN = 0x80, no -0, max 57344
	E2M1                  // float4_e2m1fn: 4-bit, max 6, no inf/NaN; two per byte in storage
	E8M0                  // float8_e8m0fnu: exponent-only MX scale, 2^-127..2^127, NaN = 0xff
	I8                    // int8
	I32                   // int32
	I64                   // int64
	numDTypes
)

// info holds the static properties of one DType.
type info struct {
	name    string
	aliases []string // extra names Parse accepts
	bits    int
	float   bool
	max     float64
}

var infos = [numDTypes]info{
	Invalid:  {name: "invalid"},
	F64:      {"float64", []string{"f64", "double"}, 64, true, math.MaxFloat64},
	F32:      {"float32", []string{"f32", "float"}, 32, true, math.MaxFloat32},
	F16:      {"float16", []string{"f16", "fp16", "half"}, 16, true, 65504},
	BF16:     {"bfloat16", []string{"bf16"}, 16, true, 0x1.fep127},
	E4M3FN:   {"float8_e4m3fn", []string{"e4m3", "fp8", "e4m3fn"}, 8, true, 448},
	E5M2:     {"float8_e5m2", []string{"e5m2"}, 8, true, 57344},
	E4M3FNUZ: {"float8_e4m3fnuz", []string{"e4m3fnuz"}, 8, true, 240},
	E5M2FNUZ: {"float8_e5m2fnuz", []string{"e5m2fnuz"}, 8, true, 57344},
	E2M1:     {"float4_e2m1fn", []string{"e2m1", "fp4"}, 4, true, 6},
	E8M0:     {"float8_e8m0fnu", []string{"e8m0"}, 8, true, 0x1p127},
	I8:       {"int8", []string{"i8"}, 8, false, math.MaxInt8},
	I32:      {"int32", []string{"i32"}, 32, false, math.MaxInt32},
	I64:      {"int64", []string{"i64"}, 64, false, math.MaxInt64},
}

// get returns d's properties; values outside the enum get Invalid's zeros.
func (d DType) get() *info {
	if d >= numDTypes {
		return &infos[Invalid]
	}
	return &infos[d]
}

// String returns PyTorch's name for d without the "torch." prefix.
func (d DType) String() string {
	if d >= numDTypes {
		return "DType(" + strconv.Itoa(int(d)) + ")"
	}
	return infos[d].name
}

// byName maps every name Parse accepts to its DType.
var byName = func() map[string]DType {
	m := make(map[string]DType)
	for d := F64; d < numDTypes; d++ {
		m[infos[d].name] = d
		for _, a := range infos[d].aliases {
			m[a] = d
		}
	}
	return m
}()

// Parse returns the DType named s, case-insensitively: a String name or a
// short alias such as "bf16", "fp8" (e4m3fn) or "half".
func Parse(s string) (DType, error) {
	if d, ok := byName[strings.ToLower(s)]; ok {
		return d, nil
	}
	var names []string
	for d := F64; d < numDTypes; d++ {
		names = append(names, infos[d].name)
		names = append(names, infos[d].aliases...)
	}
	return Invalid, fmt.Errorf("dtype: unknown dtype %q (accepted: %s)", s, strings.Join(names, ", "))
}

// MarshalText implements encoding.TextMarshaler with d's String name.
func (d DType) MarshalText() ([]byte, error) {
	if d == Invalid || d >= numDTypes {
		return nil, fmt.Errorf("dtype: cannot marshal %v", d)
	}
	return []byte(d.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler, accepting what Parse does.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err == nil {
		*d = v
	}
	return err
}

// Bits returns the width of one element; 0 for Invalid.
func (d DType) Bits() int { return d.get().bits }

// StorageBytes returns the bytes that n elements occupy. E2M1 packs two
// elements per byte, so an odd count leaves the last high nibble unused.
func (d DType) StorageBytes(n int) int { return (n*d.get().bits + 7) / 8 }

// IsFloat reports whether d is a floating-point format.
func (d DType) IsFloat() bool { return d.get().float }

// Max returns the largest finite value of d (for I64, 2^63-1 rounded to
// float64); 0 for Invalid.
func (d DType) Max() float64 { return d.get().max }
