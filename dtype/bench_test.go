package dtype

import (
	"math/rand/v2"
	"testing"
)

const benchN = 1 << 16

// benchInput returns benchN values spread over e4m3's range, including some
// subnormals and overflows.
func benchInput() []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, benchN)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 100)
	}
	return x
}

// The benchmarks report throughput in float32 bytes (4 per element).

func benchEncode(b *testing.B, d DType) {
	src := benchInput()
	dst := make([]byte, d.StorageBytes(benchN))
	b.SetBytes(4 * benchN)
	for b.Loop() {
		Encode(d, dst, src, false)
	}
}

func benchDecode(b *testing.B, d DType) {
	src := make([]byte, d.StorageBytes(benchN))
	Encode(d, src, benchInput(), false)
	dst := make([]float32, benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		Decode(d, dst, src)
	}
}

func BenchmarkEncodeBF16(b *testing.B) { benchEncode(b, BF16) }
func BenchmarkEncodeE4M3(b *testing.B) { benchEncode(b, E4M3FN) }
func BenchmarkDecodeBF16(b *testing.B) { benchDecode(b, BF16) }
func BenchmarkDecodeE4M3(b *testing.B) { benchDecode(b, E4M3FN) }
