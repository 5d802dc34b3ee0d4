"""An oracle of torchao's rowwise FP8 casts (float8/float8_utils.py:
amax_to_scale with round_scales_to_power_of_2, to_fp8_saturated), written
from their definitions with PyTorch's float32 ops for the scales and numpy
for the E4M3 rounding, which PyTorch before 2.1 lacks.

    rowwise_oracle.py IN OUT ROWS COLS

IN holds a float32 matrix [ROWS, COLS], little-endian. OUT receives three
float32 matrices of the same shape: the values a scaled GEMM multiplies
after casting IN with one scale per row (axiswise_dim=-1), with one scale
per column (axiswise_dim=0), and with one scale for the whole matrix
(tensorwise): the E4M3 codes times the scale's reciprocal.
"""

import sys

import numpy as np
import torch

E4M3_MAX = 448.0
EPS = 1e-12


def e4m3(x):
    """Rounds float64 values within ±448 (or NaN) to float8_e4m3fn's, to
    nearest, ties to even: 3 fraction bits, subnormals below 2**-6 in steps
    of 2**-9."""
    a = np.abs(x)
    _, e = np.frexp(a)  # a = m·2**e, m in [0.5, 1): the leading bit is 2**(e-1)
    step = np.exp2(np.maximum(e - 1, -6) - 3)
    with np.errstate(invalid="ignore"):
        return np.copysign(np.round(a / step) * step, x)


def cast(x, amax):
    """x cast with the scale of amax (broadcast), as the GEMM reads it."""
    scale = (E4M3_MAX / torch.clamp(amax.double(), min=EPS)).float()
    scale = torch.exp2(torch.floor(torch.log2(scale)))
    scaled = (x * scale).clamp(min=-E4M3_MAX, max=E4M3_MAX)
    codes = torch.from_numpy(e4m3(scaled.double().numpy())).float()
    return codes * scale.reciprocal()


def main():
    src, dst, rows, cols = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    x = torch.from_numpy(np.fromfile(src, dtype="<f4").reshape(rows, cols))
    out = [
        cast(x, x.abs().amax(dim=-1, keepdim=True)),
        cast(x, x.abs().amax(dim=0, keepdim=True)),
        cast(x, x.abs().max()),
    ]
    np.concatenate([o.numpy().astype("<f4").ravel() for o in out]).tofile(dst)


if __name__ == "__main__":
    main()
