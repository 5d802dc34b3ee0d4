"""PyTorch oracle for weft's dtype/dynamic: bitsandbytes' dynamic 8-bit
maps and blockwise quantization, written from their definitions with torch
ops in float32 (no bitsandbytes needed).

  oracle.py DIR BLOCKSIZE
  oracle.py torchao DIR

The first reads DIR/x_signed.f32 and DIR/x_unsigned.f32 (little-endian float32) and
writes, for each of signed and unsigned:
  map_S.f32      create_dynamic_map(signed=S): 256 values, sorted
  codes_S.u8     the code of each element
  absmax_S.f32   each block's max |x| (NaN if it holds one)
  deq_S.f32      code value times absmax
The rule: x / absmax in float32, clamped to the map's range, the argmin of
the float32 distance to the 256 values (torch.argmin: the first, lower,
code on a tie); NaN takes code 0 and a zero block the code of 0.

The second is torchao's low-bit optimizer state (torchao/optim:
quant_utils.py, subclass_4bit.py, subclass_fp8.py, adam.py), written from
its definitions with torch's float32 ops and numpy's rounding to E4M3,
which torch 1.13 lacks. It reads DIR/x.f32 and writes, for q4s
(AdamW4bit's m: create_dynamic_map(True, 3, 4)), q4u (its v:
linspace(0, 1, 17)[1:]) and fp8 (AdamWFp8's moments, float8_e4m3fn):
  map_q4s.f32, map_q4u.f32  the 16 values of each map
  codes_NAME.u8             4-bit codes packed two a byte (element 2i high),
                            or the E4M3 bytes
  scale_NAME.f32            each block's scale (128 elements, 256 for fp8)
  deq_NAME.f32              the values they decode to
A partial last block is padded with zeros (torchao takes whole blocks
only), and so is an odd count of 4-bit codes. It then reads DIR/p.f32
and DIR/g1.f32.. DIR/g3.f32 and runs three steps of single_param_adam
(eager, AdamW, lr 1e-2, betas 0.9 and 0.95, eps 1e-8, weight decay 0.1)
from zero state in 4bit and fp8, writing p_FMT_T.f32 after step T and
the moments' codes and scales after the last (codes_FMT_m.u8, ...).
"""
import os
import sys

import numpy as np
import torch


def linspace(start, end, n):
    # torch.linspace(start, end, n, dtype=torch.float32) as torch 2's CPU
    # kernel computes it, the map of bitsandbytes' published dumps: start +
    # step*i up to half way, end - step*(n-1-i) after, one rounding (a fused
    # multiply-add; float64 holds these products and sums exactly). Torch
    # 1.13's vectorised kernel adds step to a rounded base, which puts some
    # values of the map an ulp off bitsandbytes'.
    start, end = np.float32(start), np.float32(end)
    step = np.float32((end - start) / np.float32(n - 1))
    i = np.arange(n, dtype=np.float64)
    lo = np.float64(start) + np.float64(step) * i
    hi = np.float64(end) - np.float64(step) * (n - 1 - i)
    return torch.from_numpy(np.where(i < n // 2, lo, hi).astype(np.float32))


def create_dynamic_map(signed):
    # Dettmers' dynamic tree quantization as bitsandbytes builds it with 7
    # exponent bits of 8: per exponent i, linearly spaced fractions whose
    # midpoints are scaled by 10^(i-6); the unsigned map puts the sign bit
    # into the fraction.
    data = []
    for i in range(7):
        items = 2**i + 1 if signed else 2 ** (i + 1) + 1
        bounds = linspace(0.1, 1, items)
        means = (bounds[:-1] + bounds[1:]) / 2.0
        data += ((10 ** (i - 6)) * means).tolist()
        if signed:
            data += (-(10 ** (i - 6)) * means).tolist()
    data += [0.0, 1.0]
    assert len(data) == 256, len(data)
    data.sort()
    return torch.tensor(data, dtype=torch.float32)


def quantize(x, code, bs):
    n = x.numel()
    nb = (n + bs - 1) // bs
    xb = torch.cat([x, torch.zeros(nb * bs - n)]).view(nb, bs)
    absmax = xb.abs().amax(dim=1)
    scaled = (xb / absmax[:, None]).clamp(code[0].item(), 1.0)
    idx = (scaled.unsqueeze(-1) - code).abs().argmin(dim=-1)
    idx[torch.isnan(scaled)] = 0
    idx[absmax == 0] = int((code == 0).nonzero()[0])
    codes = idx.reshape(-1)[:n]
    deq = code[codes] * absmax.repeat_interleave(bs)[:n]
    return codes.to(torch.uint8), absmax, deq


def create_dynamic_map4():
    # torchao's create_dynamic_map(True, 3, 4): as above with 3 exponent
    # bits, the midpoints scaled by 10^(i-2).
    data = []
    for i in range(3):
        bounds = linspace(0.1, 1, 2**i + 1)
        means = (bounds[:-1] + bounds[1:]) / 2.0
        data += ((10 ** (i - 2)) * means).tolist()
        data += (-(10 ** (i - 2)) * means).tolist()
    data += [0.0, 1.0]
    data.sort()
    return torch.tensor(data, dtype=torch.float32)


def blocks(x, bs):
    n = x.numel()
    nb = (n + bs - 1) // bs
    return torch.cat([x, torch.zeros(nb * bs - n)]).view(nb, bs)


def quantize_4bit(x, qmap, bs):
    # scale_tensor and quantize_4bit_with_qmap, then the packing of
    # OptimState4bit's copy_.
    xb = blocks(x, bs)
    scale = xb.abs().amax(-1).clip(1e-12)
    scaled = (xb / scale.view(-1, 1)).view(-1)
    codes = torch.where(scaled >= qmap[8], 8, 0)
    codes += torch.where(scaled >= qmap[codes + 4], 4, 0)
    codes += torch.where(scaled >= qmap[codes + 2], 2, 0)
    codes += torch.where(scaled >= qmap[codes + 1], 1, 0)
    codes_up = (codes + 1).clip(max=15)
    val_down = qmap[codes]
    val_up = qmap[codes_up]
    residual = scaled - val_down
    codes = torch.where(residual >= (val_up - val_down) * 0.5, codes_up, codes)
    codes = codes[: x.numel()]
    if codes.numel() % 2:
        codes = torch.cat([codes, torch.zeros(1, dtype=codes.dtype)])
    packed = (codes[::2] << 4) | codes[1::2]
    return packed.to(torch.uint8), scale


def dequantize_4bit(packed, scale, qmap, bs, n):
    codes = torch.stack([packed >> 4, packed & 0b1111], dim=-1).view(-1)[:n].long()
    return qmap[codes] * scale.repeat_interleave(bs)[:n]


E4M3_MAX = 448.0


def e4m3(x):
    # Rounds float64 values (within range) to float8_e4m3fn's, to nearest
    # even: 3 fraction bits, smallest normal exponent -6.
    a = np.abs(x)
    _, e = np.frexp(a)
    step = np.exp2(np.maximum(e - 1, -6) - 3)
    return np.copysign(np.round(a / step) * step, x)


def e4m3_bytes(v):
    # The bit patterns of float8_e4m3fn values v (float64).
    out = np.zeros(v.shape, dtype=np.uint8)
    for i, x in enumerate(v):
        sign = 0x80 if np.signbit(x) else 0
        a = abs(x)
        if a == 0:
            out[i] = sign
            continue
        m, e = np.frexp(a)  # a = m * 2**e, m in [0.5, 1)
        if e - 1 < -6:  # subnormal: a = f * 2**-9
            out[i] = sign | int(round(a / 2.0**-9))
        else:
            out[i] = sign | ((e - 1 + 7) << 3) | int(round((m * 2 - 1) * 8))
    return out


def quantize_fp8(x, bs):
    xb = blocks(x, bs)
    scale = xb.abs().amax(-1).clip(1e-12) / E4M3_MAX
    scaled = (xb / scale.view(-1, 1)).view(-1)[: x.numel()]
    vals = e4m3(scaled.double().numpy())
    return torch.from_numpy(e4m3_bytes(vals)), torch.from_numpy(vals).float(), scale


def dequantize_fp8(vals, scale, bs, n):
    return vals * scale.repeat_interleave(bs)[:n]


class State:
    # One moment in a torchao format, from OptimState4bit.zeros or
    # OptimStateFp8.zeros.
    def __init__(self, fmt, signed, n):
        self.fmt, self.n = fmt, n
        if fmt == "4bit":
            self.bs = 128
            self.qmap = create_dynamic_map4() if signed else torch.linspace(0, 1, 17)[1:]
            self.codes = torch.zeros((n + 1) // 2, dtype=torch.uint8)
        else:
            self.bs = 256
            self.codes = torch.zeros(n, dtype=torch.uint8)
            self.vals = torch.zeros(n)
        self.scale = torch.zeros((n + self.bs - 1) // self.bs)

    def dequantize(self):
        if self.fmt == "4bit":
            return dequantize_4bit(self.codes, self.scale, self.qmap, self.bs, self.n)
        return dequantize_fp8(self.vals, self.scale, self.bs, self.n)

    def copy_(self, x):
        if self.fmt == "4bit":
            self.codes, self.scale = quantize_4bit(x, self.qmap, self.bs)
        else:
            self.codes, self.vals, self.scale = quantize_fp8(x, self.bs)


def torchao_steps(p, grads, fmt, lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1):
    # single_param_adam with IS_ADAMW, eagerly, from _AdamBase.step's state.
    lr = torch.tensor(lr, dtype=torch.float32)
    step = torch.tensor(0.0)
    exp_avg, exp_avg_sq = State(fmt, True, p.numel()), State(fmt, False, p.numel())
    out = []
    for grad in grads:
        step += 1
        p_f32 = p.float()
        grad_f32 = grad.float()
        p_f32 = p_f32 - lr * weight_decay * p_f32
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        exp_avg_f32 = exp_avg.dequantize().lerp(grad_f32, 1 - beta1)
        exp_avg_sq_f32 = exp_avg_sq.dequantize().lerp(grad_f32.square(), 1 - beta2)
        exp_avg.copy_(exp_avg_f32)
        exp_avg_sq.copy_(exp_avg_sq_f32)
        denom = (exp_avg_sq_f32.sqrt() / bias_correction2.sqrt()) + eps
        p_f32 = p_f32 - lr * (exp_avg_f32 / bias_correction1) / denom
        p = p_f32
        out.append(p)
    return out, exp_avg, exp_avg_sq


def read(d, name):
    return torch.from_numpy(np.fromfile(os.path.join(d, name), dtype="<f4"))


def write(d, name, t):
    t.numpy().tofile(os.path.join(d, name))


def torchao(d):
    x = read(d, "x.f32")
    maps = {"q4s": create_dynamic_map4(), "q4u": torch.linspace(0, 1, 17)[1:]}
    for name, qmap in maps.items():
        write(d, f"map_{name}.f32", qmap)
        codes, scale = quantize_4bit(x, qmap, 128)
        write(d, f"codes_{name}.u8", codes)
        write(d, f"scale_{name}.f32", scale)
        write(d, f"deq_{name}.f32", dequantize_4bit(codes, scale, qmap, 128, x.numel()))
    codes, vals, scale = quantize_fp8(x, 256)
    write(d, "codes_fp8.u8", codes)
    write(d, "scale_fp8.f32", scale)
    write(d, "deq_fp8.f32", dequantize_fp8(vals, scale, 256, x.numel()))
    p, grads = read(d, "p.f32"), [read(d, f"g{t}.f32") for t in (1, 2, 3)]
    for fmt in ("4bit", "fp8"):
        ps, m, v = torchao_steps(p, grads, fmt)
        for t, pt in enumerate(ps, 1):
            write(d, f"p_{fmt}_{t}.f32", pt)
        for name, st in (("m", m), ("v", v)):
            write(d, f"codes_{fmt}_{name}.u8", st.codes)
            write(d, f"scale_{fmt}_{name}.f32", st.scale)


def main(argv):
    if argv[0] == "torchao":
        torchao(argv[1])
        return
    d, bs = argv[0], int(argv[1])
    for name, signed in (("signed", True), ("unsigned", False)):
        code = create_dynamic_map(signed)
        x = torch.from_numpy(np.fromfile(os.path.join(d, f"x_{name}.f32"), dtype="<f4"))
        codes, absmax, deq = quantize(x, code, bs)
        code.numpy().astype("<f4").tofile(os.path.join(d, f"map_{name}.f32"))
        codes.numpy().tofile(os.path.join(d, f"codes_{name}.u8"))
        absmax.numpy().astype("<f4").tofile(os.path.join(d, f"absmax_{name}.f32"))
        deq.numpy().astype("<f4").tofile(os.path.join(d, f"deq_{name}.f32"))


if __name__ == "__main__":
    main(sys.argv[1:])
