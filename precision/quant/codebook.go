package quant

import "sort"

// Codebook is a 4-bit data type: the value each of its 16 codes stands
// for, in [-1, 1], and the rule that picks a code for a value scaled into
// that range.
type Codebook struct {
	name   string
	values [16]float32
	encode func(x float32) uint8
}

// Values returns the 16 values the codes stand for, as a GEMM operand's
// codebook wants them.
func (c *Codebook) Values() *[16]float32 { return &c.values }

// Name returns the data type's name: "nf4" or "fp4".
func (c *Codebook) Name() string { return c.name }

// Value returns the value code stands for; only its low 4 bits count.
func (c *Codebook) Value(code uint8) float32 { return c.values[code&0xf] }

// Encode returns the code nearest x, which should lie in [-1, 1]: the
// decision trees of bitsandbytes' dQuantizeNF4 and dQuantizeFP4, so a value
// on a boundary between two codes takes the one of smaller magnitude
// (NF4: the lower one), and NaN takes code 0.
func (c *Codebook) Encode(x float32) uint8 { return c.encode(x) }

// NF4 is 4-bit NormalFloat (QLoRA, Dettmers et al. 2023): 16 quantiles of
// N(0, 1) scaled to [-1, 1], with an exact zero. The values are
// bitsandbytes' get_4bit_type("nf4") in bitsandbytes/functional.py, equal
// to the float literals of dDequantizeNF4 in csrc/kernels.cu; code 0 is
// -1, code 7 is 0 and code 15 is 1.
var NF4 = &Codebook{
	name: "nf4",
	values: [16]float32{
		-1.0,
		-0.6961928009986877,
		-0.5250730514526367,
		-0.39491748809814453,
		-0.28444138169288635,
		-0.18477343022823334,
		-0.09105003625154495,
		0.0,
		0.07958029955625534,
		0.16093020141124725,
		0.24611230194568634,
		0.33791524171829224,
		0.44070982933044434,
		0.5626170039176941,
		0.7229568362236023,
		1.0,
	},
	encode: encodeNF4,
}

// nf4Pivots are the boundaries of dQuantizeNF4's tree, low to high: the
// midpoints of consecutive NF4 values, as bitsandbytes writes them.
var nf4Pivots = [15]float32{
	-0.8480964004993439, -0.6106329262256622, -0.4599952697753906, -0.33967943489551544,
	-0.23460740596055984, -0.13791173323988914, -0.045525018125772476, 0.03979014977812767,
	0.1202552504837513, 0.2035212516784668, 0.2920137718319893, 0.3893125355243683,
	0.5016634166240692, 0.6427869200706482, 0.8614784181118011,
}

// encodeNF4 counts the pivots x exceeds, which is the code: NF4 codes are
// in value order.
func encodeNF4(x float32) uint8 {
	return uint8(sort.Search(len(nf4Pivots), func(i int) bool { return !(x > nf4Pivots[i]) }))
}

// FP4 is bitsandbytes' 4-bit float: a sign bit and 3 bits of magnitude
// with 2 exponent bits, 1 mantissa bit and a subnormal, normalised so that
// its largest value is 1. Its magnitude codes are not in value order:
// 0b000=0, 0b001=0.0625, 0b010=8, 0b011=12, 0b100=4, 0b101=6, 0b110=2,
// 0b111=3, all divided by 12, and bit 3 is the sign (0b1000 is 0). This is
// get_4bit_type("fp4") in bitsandbytes/functional.py and dDequantizeFP4Tree
// in csrc/kernels.cu; it differs from OCP's float4_e2m1fn (dtype.E2M1),
// whose codes are in value order.
var FP4 = &Codebook{
	name: "fp4",
	values: [16]float32{
		0, 0.0625 / 12, 8.0 / 12, 12.0 / 12, 4.0 / 12, 6.0 / 12, 2.0 / 12, 3.0 / 12,
		-0, -0.0625 / 12, -8.0 / 12, -12.0 / 12, -4.0 / 12, -6.0 / 12, -2.0 / 12, -3.0 / 12,
	},
	encode: encodeFP4,
}

// fp4Pivots are the magnitude boundaries of dQuantizeFP4's tree, low to
// high, as bitsandbytes writes them (some are a few ulps off the exact
// midpoints, which is what its kernels compute with), and fp4Codes the
// magnitude code of each interval between them.
var (
	fp4Pivots = [7]float32{0.00260417, 0.0859375, 0.20833333, 0.29166667, 0.4166667, 0.583333, 0.8333333}
	fp4Codes  = [8]uint8{0b000, 0b001, 0b110, 0b111, 0b100, 0b101, 0b010, 0b011}
)

// encodeFP4 takes the sign bit from x < 0 and the magnitude code from |x|.
func encodeFP4(x float32) uint8 {
	var sign uint8
	if x < 0 {
		sign, x = 0b1000, -x
	}
	i := sort.Search(len(fp4Pivots), func(i int) bool { return !(x > fp4Pivots[i]) })
	return sign | fp4Codes[i]
}
