"""Oracles of torchao's FP8 and MX casts, written from their definitions
with PyTorch's float32 ops for the scales and numpy for the rounding to
E4M3 and E2M1, which PyTorch 1.13 lacks.

    oracle.py rowwise IN OUT ROWS COLS
    oracle.py mxfp4 IN OUT ROWS COLS

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


def main():
    mode, src, dst, rows, cols = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    x = torch.from_numpy(np.fromfile(src, dtype="<f4").reshape(rows, cols))
    out = {"rowwise": rowwise, "mxfp4": mxfp4}[mode](x)
    np.concatenate([o.numpy().astype("<f4").ravel() for o in out]).tofile(dst)


if __name__ == "__main__":
    main()
