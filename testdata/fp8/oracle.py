"""Oracles of torchao's and Transformer Engine's FP8 and FP4 casts,
written from their definitions with PyTorch's float32 ops for the scales
and numpy for the rounding to E4M3 and E2M1, which PyTorch 1.13 lacks.

    oracle.py rowwise IN OUT ROWS COLS
    oracle.py mxfp4 IN OUT ROWS COLS
    oracle.py nvfp4 IN OUT ROWS COLS
    oracle.py block IN OUT ROWS COLS
    oracle.py nvfp4sr IN OUT ROWS COLS

IN holds a float32 matrix [ROWS, COLS], little-endian; OUT receives float32
matrices of the same shape, the values a GEMM multiplies after the cast
(the codes times their scale):

rowwise (float8/float8_utils.py: amax_to_scale with
round_scales_to_power_of_2, to_fp8_saturated): the matrix cast to E4M3
with one scale per row (axiswise_dim=-1), with one scale per column
(axiswise_dim=0), and with one for the whole matrix (tensorwise).

mxfp4 (prototype/mx_formats/mx_tensor.py: to_mx, ScaleCalculationMode.FLOOR,
and to_dtype): the matrix cast to E2M1 in blocks of 32 along each row, then
down each column (a last block shorter where 32 does not divide the line).

nvfp4 (Transformer Engine's reference quantizer, custom_recipes/
quantization_nvfp4.py, _quantize_blockwise_reference and cast_to_fp4x2):
the matrix cast to E2M1 with E4M3 scales in blocks of 16 along each row;
down each column after the random Hadamard transform of each 16
consecutive elements (summed in float64 in order, rounded to float32; a
shorter last block is left as it is); in 16×16 tiles; each as the codes'
values times their block's decode scale, then the three tensors' amax/2688
as three float32s.

nvfp4sr: nvfp4's first two casts with the output gradient's stochastic
rounding (fp4_quant_bwd_grad's stochastic_rounding=True), IN holding after
the matrix 2·ROWS·COLS uint16 random words, one an element of the cast
along rows and then one an element of the transposed cast: each scaled
value, clamped to ±6, has its random word added to the 16 bits below
E2M1's last bit and the sum truncated, as cvt.rs rounds (NaN and ±0 to
+0); then the two global scales.

block (Transformer Engine's Float8BlockScaling as its reference quantizer,
tests/pytorch/references/blockwise_quantizer_reference.py, defines it,
with scale_from_amax_tensor's special cases as the kernels' recipe_common.cuh
compute_scale_from_amax has them): the matrix cast to E4M3 in 1×128 blocks
along each row, in 128×1 blocks down each column, and in 128×128 tiles, each
with power-of-two scales (a shorter block or tile at the edges, padded with
zeros as the reference pads it); then in 1×128 blocks along rows with
float32 scales (NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1).
"""

import sys

import numpy as np
import torch

E4M3_MAX, E2M1_MAX = 448.0, 6.0
EPS = 1e-12


def minifloat(x, mbits, emin):
    """Rounds float64 values within the format's range (or NaN) to a
    minifloat's with mbits fraction bits and smallest normal exponent emin,
    to nearest, ties to even; subnormals step by 2**(emin - mbits)."""
    a = np.abs(x)
    _, e = np.frexp(a)  # a = m·2**e, m in [0.5, 1): the leading bit is 2**(e-1)
    step = np.exp2(np.maximum(e - 1, emin) - mbits)
    with np.errstate(invalid="ignore"):
        return np.copysign(np.round(a / step) * step, x)


def e4m3(x):
    return minifloat(x, 3, -6)


def e2m1(x):
    return minifloat(x, 1, 0)


def rowwise_cast(x, amax):
    """x cast with the scale of amax (broadcast), as the GEMM reads it."""
    scale = (E4M3_MAX / torch.clamp(amax.double(), min=EPS)).float()
    scale = torch.exp2(torch.floor(torch.log2(scale)))
    scaled = (x * scale).clamp(min=-E4M3_MAX, max=E4M3_MAX)
    codes = torch.from_numpy(e4m3(scaled.double().numpy())).float()
    return codes * scale.reciprocal()


def rowwise(x):
    return [
        rowwise_cast(x, x.abs().amax(dim=-1, keepdim=True)),
        rowwise_cast(x, x.abs().amax(dim=0, keepdim=True)),
        rowwise_cast(x, x.abs().max()),
    ]


def mx_block(b):
    """One block as to_mx casts it to E2M1 and to_dtype reads it back."""
    amax = b.abs().max()
    if torch.isnan(amax):
        return torch.full_like(b, float("nan"))
    exponent = ((amax.view(torch.int32) >> 23) & 0xFF) - 127
    e = torch.clamp(exponent - 2, min=-127, max=128)
    scale = ((e + 127).to(torch.int32) << 23).view(torch.float32)
    scale = torch.clamp(scale, min=2.0**-126)
    lp = (b / scale).clamp(min=-E2M1_MAX, max=E2M1_MAX)
    codes = torch.from_numpy(e2m1(lp.double().numpy())).float()
    return codes * torch.pow(2.0, e.to(torch.int16)).float()


def mx_lines(x):
    out = torch.empty_like(x)
    for r in range(x.shape[0]):
        for s in range(0, x.shape[1], 32):
            out[r, s : s + 32] = mx_block(x[r, s : s + 32])
    return out


def mxfp4(x):
    return [mx_lines(x), mx_lines(x.t().contiguous()).t()]


F32_MAX = torch.tensor(torch.finfo(torch.float32).max)
HADAMARD_SIGNS = [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]


def te_e2m1(x):
    """cast_to_fp4x2's thresholds on float32 values within ±6 (NaN to +0)."""
    x = x.numpy()
    out = np.zeros_like(x)
    for lo, hi, lo_in, hi_in, v in [
        (0.25, 0.75, False, False, 0.5), (0.75, 1.25, True, True, 1.0), (1.25, 1.75, False, False, 1.5),
        (1.75, 2.5, True, True, 2.0), (2.5, 3.5, False, False, 3.0), (3.5, 5.0, True, True, 4.0),
    ]:
        for sign in (1, -1):
            a = sign * x
            inside = ((a >= lo) if lo_in else (a > lo)) & ((a <= hi) if hi_in else (a < hi))
            out[inside] = sign * v
    out[x > 5.0] = 6.0
    out[x < -5.0] = -6.0
    out[(x < 0) & (x >= -0.25)] = -0.0
    return torch.from_numpy(out)


def sr_e2m1(x, r):
    """x (within ±6) rounded to E2M1 with the 16-bit random words r."""
    a = np.abs(x.double().numpy())
    step = np.where(a < 2, 0.5, np.where(a < 4, 1.0, 2.0))
    units = np.floor((np.floor(a / step * 65536) + r.numpy()) / 65536)
    q = np.where(a > 0, np.copysign(units * step, x.numpy()), 0.0)
    return torch.from_numpy(q).float()


def nvfp4_cast(x, tile, bits=None):
    amax = x.abs().max()
    g = torch.minimum(torch.tensor(2688.0) / amax, F32_MAX)
    if g == 0:
        g = torch.tensor(1.0)
    gdec = torch.tensor(1.0) / g
    mult = g * torch.reciprocal(torch.tensor(6.0))
    out = torch.empty_like(x)
    for r in range(0, x.shape[0], tile):
        for c in range(0, x.shape[1], 16):
            b = x[r : r + tile, c : c + 16]
            d = torch.minimum(b.abs().max() * mult, F32_MAX).clamp(min=-448.0, max=448.0)
            d = torch.tensor(e4m3(d.double().numpy()), dtype=torch.float32)
            enc = torch.minimum(torch.tensor(1.0) / (d * gdec), F32_MAX)
            scaled = (b * enc).clamp(min=-6.0, max=6.0)
            if bits is None:
                out[r : r + tile, c : c + 16] = te_e2m1(scaled) * d
            else:
                out[r : r + tile, c : c + 16] = sr_e2m1(scaled, bits[r : r + tile, c : c + 16]) * d
    return out, amax / 2688.0


def hadamard_rows(x):
    out = x.clone()
    for r in range(x.shape[0]):
        for b in range(0, x.shape[1] - 15, 16):
            v = [float(t) for t in x[r, b : b + 16]]
            for i in range(16):
                s = 0.0
                for k in range(16):
                    h = 0.25 * HADAMARD_SIGNS[k] * (-1 if bin(k & i).count("1") % 2 else 1)
                    s += v[k] * h
                out[r, b + i] = s
    return out


def nvfp4(x):
    rows, s_rows = nvfp4_cast(x, 1)
    cols, s_cols = nvfp4_cast(hadamard_rows(x.t().contiguous()), 1)
    tiles, s_tiles = nvfp4_cast(x, 16)
    return [rows, cols.t(), tiles, torch.stack([s_rows, s_cols, s_tiles])]


def nvfp4sr(x, bits):
    n = x.numel()
    rows, s_rows = nvfp4_cast(x, 1, bits[:n].reshape(x.shape))
    cols, s_cols = nvfp4_cast(hadamard_rows(x.t().contiguous()), 1, bits[n:].reshape(x.shape[1], x.shape[0]))
    return [rows, cols.t(), torch.stack([s_rows, s_cols])]


def block_scale(amax, pow2):
    """compute_scale_from_amax with epsilon 0 on float32 input: 1 for an
    amax of 0, inf or NaN; else 448/amax, float32's max where that is inf,
    rounded down to a power of two (frexp, ldexp) with pow2."""
    scale = torch.tensor(E4M3_MAX, dtype=torch.float32) / amax
    scale = torch.where(scale == float("inf"), F32_MAX, scale)
    if pow2:
        _, e = torch.frexp(scale)
        scale = torch.ldexp(torch.ones_like(scale), e - 1)
    special = (amax == 0) | (amax == float("inf")) | torch.isnan(amax)
    return torch.where(special, torch.ones_like(scale), scale)


def block_cast(x, tile_rows, pow2):
    """x cast in tile_rows×128 tiles, the amax of each over its non-NaN
    elements (the kernels reduce with fmaxf, which drops NaN)."""
    m, k = x.shape
    pm, pk = -m % tile_rows, -k % 128
    xp = torch.nn.functional.pad(x, (0, pk, 0, pm))
    M, K = xp.shape
    tiles = xp.reshape(M // tile_rows, tile_rows, K // 128, 128)
    a = tiles.abs()
    amax = torch.where(torch.isnan(a), torch.zeros_like(a), a).amax(dim=(1, 3), keepdim=True)
    scale = block_scale(amax, pow2)
    scaled = (tiles * scale).clamp(min=-E4M3_MAX, max=E4M3_MAX)
    codes = torch.from_numpy(e4m3(scaled.double().numpy())).float()
    return (codes * torch.reciprocal(scale)).reshape(M, K)[:m, :k]


def block(x):
    return [
        block_cast(x, 1, True),
        block_cast(x.t().contiguous(), 1, True).t(),
        block_cast(x, 128, True),
        block_cast(x, 1, False),
    ]


def main():
    mode, src, dst, rows, cols = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    raw = np.fromfile(src, dtype=np.uint8)
    x = torch.from_numpy(raw[: 4 * rows * cols].view("<f4").reshape(rows, cols).copy())
    if mode == "nvfp4sr":
        out = nvfp4sr(x, torch.from_numpy(raw[4 * rows * cols :].view("<u2").astype(np.int64)))
    else:
        out = {"rowwise": rowwise, "mxfp4": mxfp4, "nvfp4": nvfp4, "block": block}[mode](x)
    np.concatenate([o.numpy().astype("<f4").ravel() for o in out]).tofile(dst)


if __name__ == "__main__":
    main()
