"""Oracle of dtype.BF16StochasticRound, independent of weft's Go code.

torchao/optim/quant_utils.py _fp32_to_bf16_sr, given its random 16 bits:
round the float32 x to bfloat16 away from zero when rand < the low 16 bits
of x's bit pattern, towards zero otherwise; weft keeps NaN a (quiet) NaN
with its sign, as its round-to-nearest cast does. Plain Python (struct), so
it runs where numpy is not installed; it writes bf16_sr.csv beside itself:
x (float32 bits), r (16 random bits), want (bfloat16 bits), all in hex.

    python3 testdata/bf16-sr/oracle.py
"""
import os
import random
import struct


def f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def sr(xbits, r):
    exp_all_ones = (xbits >> 23) & 0xFF == 0xFF
    mantissa = xbits & 0x7FFFFF
    if exp_all_ones and mantissa != 0:  # NaN: quiet it, keep the sign
        return (xbits >> 16) | 0x40
    towards_zero = xbits & 0xFFFF0000
    if r < (xbits & 0xFFFF):
        towards_zero += 0x10000
    return (towards_zero >> 16) & 0xFFFF


def main():
    rng = random.Random(20606)
    xs = [
        0x00000000, 0x80000000,  # ±0
        0x7F800000, 0xFF800000,  # ±inf
        0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF80FFFF, 0x7FBF0000, 0x7FFFFFFF,  # NaNs
        0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F0001, 0x7F7F8000,  # near the largest finite
        0x00000001, 0x80000001, 0x0000FFFF, 0x807FFFFF, 0x00010000, 0x0001FFFF,  # denormals
        0x00800000, 0x80800000,  # smallest normals
        0x3F800000, 0xBF800000, 0x3F808000, 0x3F80FFFF, 0x3F800001, 0x3F7FFFFF,
        f32_bits(0.1), f32_bits(-0.1), f32_bits(3.14159), f32_bits(-1e-30), f32_bits(6.5e4),
    ]
    xs += [rng.getrandbits(32) for _ in range(64)]
    rs = [0x0000, 0x0001, 0x7FFF, 0x8000, 0xFFFE, 0xFFFF]
    rows = []
    for x in xs:
        for r in rs + [rng.getrandbits(16) for _ in range(2)]:
            rows.append((x, r, sr(x, r)))
        rows.append((x, x & 0xFFFF, sr(x, x & 0xFFFF)))  # r equal to the low bits: towards zero
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bf16_sr.csv")
    with open(out, "w") as f:
        f.write("x,r,want\n")
        for x, r, want in rows:
            f.write(f"{x:08x},{r:04x},{want:04x}\n")


if __name__ == "__main__":
    main()
