#!/usr/bin/python3
"""CPU oracle for weft's low-precision cnn/gpt parity runs.

Run with Debian's PyTorch 1.13 (CPU only):   /usr/bin/python3 make_trajectories.py
It reads ../reference/{refs.safetensors,trajectories.json} (or --ref DIR) and
writes trajectories.json next to this script: the reference's runs unchanged,
plus `bf16-mixed` and `bf16-true` for cnn and gpt (40 steps each), computed
with the semantics of ../reference/README.md (CUDA autocast / bf16 tensors on
an H200, Lightning Fabric, PyTorch 2.11's single-tensor AdamW).
It also replays 32-true for every model and bf16-mixed / bf16-true for mlp
and compares them with the CUDA reference (validation.json); those replays
are NOT written into trajectories.json (the CUDA runs stay).

Not produced: 16-mixed and 16-true (torch 1.13's CPU backend has no float16
conv2d/matmul kernels; a float16 emulation with GradScaler was out of scope).

WHY EXPLICIT EMULATION INSTEAD OF torch.autocast("cpu") / CPU bf16 kernels
--------------------------------------------------------------------------
Probed on this machine (torch 1.13.0a0, BLAS_INFO=generic, CPU capability AVX2):
  * CPU autocast's lists differ from CUDA's: layer_norm is not in CPU's fp32
    list (bf16 input + fp32 weight raises "expected scalar type BFloat16 but
    found Float"), softmax/log_softmax of a bf16 input return bf16 (CUDA
    autocast runs them as softmax(x, dtype=float32) and returns float32).
  * CPU bf16 matmul does NOT accumulate in float32: a [1,4096]x[4096,1] bf16
    product of 1.0 * bf16(3/4096) gives 0.25 instead of 3.0 (the running sum
    is rounded to bf16 at every step); a 4x8x6 mm is off by >1.0. CUDA
    (cuBLAS/cuDNN) accumulates in float32 and rounds once.
So nothing here runs in a bf16 torch dtype. Every tensor is a float32 torch
tensor holding, where its nominal dtype is bf16, only bf16-representable
values, and every op is computed in float32 from those values and then rounded
to bf16 where CUDA produces a bf16 result -- exactly what a bf16 CUDA kernel /
tensor core does (bf16 inputs, float32 arithmetic/accumulation, one rounding).

Rounding in autograd: Q(x) is an autograd function with forward
round_to_bf16(x) and backward round_to_bf16(grad). A bf16 op is computed as
    out = Q( f( Q(in_1), Q(in_2), ... ) )        (f in float32, torch autograd)
  - forward: the Q on inputs are no-ops (values are bf16 already), the Q on the
    output is the kernel's single rounding;
  - backward: f's float32 backward formula (one fused CUDA kernel: float32
    inside) followed by the input-side Q is the single rounding of each input
    gradient to bf16; the output-side Q rounds the sum of the gradients of a
    bf16 tensor used by several ops (autograd accumulates a bf16 tensor's
    gradient in bf16).
  - a dtype cast (autocast's cast of a float32 weight/activation to bf16, or a
    bf16 tensor to float32 for an fp32-list op / the loss) is also Q: forward
    rounds (or is exact), backward rounds the gradient to the source's dtype
    only where that dtype is bf16 ... which Q does (rounding an already-bf16
    gradient is exact), so a float32 weight under autocast gets a float32
    gradient holding bf16-rounded values, as the README says.

Per-run op rules (README, "CUDA autocast rules that matter here"):
  32-true    every tensor float32, no rounding.
  bf16-mixed float32 parameters; inputs (cnn.x, mlp.x) rounded to bf16 first
             (Fabric's convert_input); linear, matmul (bmm) and conv2d cast
             all their inputs (incl. weights, biases) to bf16 -> bf16 result;
             layer_norm and softmax cast their inputs to float32 -> float32
             result; gelu, relu, add, mul, masked_fill, embedding, views run in
             their inputs' widest dtype (bf16 + f32 -> f32, exact promotion,
             the bf16 operand's gradient rounded back to bf16). Logits are cast
             to float32 and the cross-entropy is computed outside, in float32.
  bf16-true  module, inputs and AdamW state bf16 (init weights rounded); every
             op rounds its result to bf16 (float32 inside), including
             layer_norm and softmax (CUDA's bf16 kernels use float32 mean/rstd
             and float32 exp/sum inside, one rounding of the result).
Op-level details matching CUDA's PyTorch 2.11 kernels:
  * linear = addmm (2-D) / _flatten_nd_linear (contiguous 3-D, gpt) ->
    x@W^T + b accumulated in float32, ONE rounding (cuBLAS beta=1 / bias
    epilogue). Bias gradient = float32 sum of the bf16 output gradient,
    rounded once.
  * conv2d with bias: cuDNN computes the convolution (float32 accumulation,
    rounded to bf16), then ATen does output.add_(bias) as a separate bf16 op:
    TWO roundings (Convolution.cpp, ConvBackend::Cudnn). Backward: cuDNN data
    and weight gradients rounded once; bias gradient = sum over N,H,W rounded
    once.
  * gpt attention: att = (q @ k^T) * 0.25 (exact in bf16), masked_fill(-inf),
    softmax over the last axis, y = att @ v. Under bf16-mixed softmax returns
    float32 and the second matmul casts it back to bf16.
  * backward formulas read the tensors CUDA saves: inputs (bf16 where the op
    ran in bf16) and, for softmax, its output -- the bf16-rounded output under
    bf16-true (see _Softmax), the float32 one under bf16-mixed. LayerNorm saves
    float32 mean/rstd (acc type) in both.
  * embedding backward: float32 accumulation (CUDA feature kernel for 128
    indices), rounded once.
AdamW (README's op list == PyTorch 2.11 _single_tensor_adam with decoupled
weight decay). torch 1.13's own AdamW(foreach=False) is NOT used: it updates
m with mul_(beta1).add_(grad, alpha=1-beta1) (two ops, two bf16 roundings)
instead of 2.11's lerp_. Each line below is one op on float32 arithmetic,
rounded to the parameter's dtype (bf16 for bf16-true, else float32):
    p = p * f32(1 - lr*wd)                       # mul_
    m = fma(f32(1-b1), g - m, m)                 # lerp_ (weight 0.1 < 0.5: self + w*(end-self),
                                                 #   which nvcc contracts to an fma)
    v = v * f32(b2)                              # mul_
    v = fma(f32(1-b2), g * g, v)                 # addcmul_ (pointwise_op_impl: fma(alpha, b*c, a))
    d = sqrt(v)                                  # sqrt
    d = d * f32(1 / sqrt(1-b2^t))                # CUDA div_true by a CPU scalar multiplies by
                                                 #   the reciprocal computed in double
    d = d + f32(eps)                             # add_
    p = fma(f32(-lr/(1-b1^t)), m / d, p)         # addcdiv_ (fma(alpha, b/c, a))
Scalars are computed in float64 (Python) and converted to float32. These fma /
reciprocal details only move float32 ulps (they are invisible in bf16-true);
they follow recent PyTorch CUDA sources (Lerp.h; DeviceAddCmulCdiv.cuh, whose
explicit std::fma may postdate 2.11 -- before it nvcc's default contraction
fused the same expressions; BinaryDivTrueKernel.cu). Without them mlp
bf16-mixed drifts to 2.7e-3 from CUDA at step 58 instead of 1.4e-3: at this
level the drift is chaotic (see noise_floor.py), not a semantic signal.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
# One thread: CPU float32 conv/reduction kernels split work (and so summation
# order) by thread count; with one thread the output is reproducible.
torch.set_num_threads(1)
F32 = torch.float32
BF = torch.bfloat16

# ---------------------------------------------------------------- safetensors
_ST_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32,
              "F16": np.float16, "U8": np.uint8, "I8": np.int8}


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=_ST_DTYPES[v["dtype"]]).reshape(v["shape"])
        out[k] = torch.from_numpy(arr.copy())
    return out


# ---------------------------------------------------------------- rounding
def rnd(t):
    """Round a float32 tensor to bf16 (RNE, torch's cast) and back to float32."""
    return t.to(BF).to(F32)


class _Q(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return rnd(x)

    @staticmethod
    def backward(ctx, g):
        return rnd(g)


def Q(x):
    return _Q.apply(x)


class T:
    """A float32 torch tensor with its nominal (CUDA-side) dtype: 'f32' or 'bf16'."""
    __slots__ = ("t", "dt")

    def __init__(self, t, dt):
        self.t, self.dt = t, dt

    # shape ops: exact, keep the dtype
    def view(self, *s):
        return T(self.t.view(*s), self.dt)

    def reshape(self, *s):
        return T(self.t.reshape(*s), self.dt)

    def transpose(self, a, b):
        return T(self.t.transpose(a, b), self.dt)

    def split(self, n, dim):
        return [T(p, self.dt) for p in self.t.split(n, dim)]


def cast(x, dt):
    if x.dt == dt:
        return x
    return T(Q(x.t), dt)  # f32->bf16 rounds; bf16->f32 exact fwd, bwd rounds grad


class Mode:
    """The precision of a run: which dtype each op computes its result in."""

    def __init__(self, name):
        assert name in ("32-true", "bf16-mixed", "bf16-true"), name
        self.name = name
        self.param_dt = "bf16" if name == "bf16-true" else "f32"
        self.input_dt = "f32" if name == "32-true" else "bf16"

    def op(self, category, fn, *xs):
        """Run fn (float32 torch) on tagged inputs under this run's rules.
        category: 'lowp' (linear/matmul/conv), 'fp32' (layer_norm/softmax), 'other'."""
        if self.name == "bf16-mixed" and category == "lowp":
            dt = "bf16"
        elif self.name == "bf16-mixed" and category == "fp32":
            dt = "f32"
        else:  # the widest floating input (bf16-true: all bf16; 32-true: all f32)
            dt = "f32" if any(x.dt == "f32" for x in xs if isinstance(x, T)) else "bf16"
        args = []
        for x in xs:
            if isinstance(x, T):
                x = cast(x, dt)
                args.append(Q(x.t) if dt == "bf16" else x.t)  # input-side gradient rounding
            else:
                args.append(x)
        out = fn(*args, r=(rnd_ag if dt == "bf16" else (lambda z: z)))
        if dt == "bf16":
            out = Q(out)
        return T(out, dt)

    # ---- the ops the models use
    def linear(self, x, w, b=None):
        if b is None:
            return self.op("lowp", lambda x, w, r: x @ w.t(), x, w)
        return self.op("lowp", lambda x, w, b, r: x @ w.t() + b, x, w, b)

    def conv2d(self, x, w, b, stride, padding):
        # cuDNN conv (rounded), then bias added by a separate bf16 add_ (rounded)
        return self.op("lowp", lambda x, w, b, r: r(F.conv2d(x, w, None, stride, padding)) + b.view(1, -1, 1, 1),
                       x, w, b)

    def matmul(self, a, b):
        return self.op("lowp", lambda a, b, r: a @ b, a, b)

    def layer_norm(self, x, w, b):
        return self.op("fp32", lambda x, w, b, r: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5), x, w, b)

    def softmax(self, x):
        # softmax's backward uses its saved OUTPUT: the bf16 (rounded) one when
        # the op ran in bf16 (bf16-true), the float32 one under autocast.
        return self.op("fp32", lambda x, r: _Softmax.apply(x, r is rnd_ag), x)

    def gelu(self, x):
        return self.op("other", lambda x, r: F.gelu(x), x)

    def relu(self, x):
        return self.op("other", lambda x, r: F.relu(x), x)

    def add(self, a, b):
        return self.op("other", lambda a, b, r: a + b, a, b)

    def mul_scalar(self, a, s):
        return self.op("other", lambda a, r: a * s, a)

    def masked_fill(self, a, mask, val):
        return self.op("other", lambda a, r: a.masked_fill(mask, val), a)

    def embedding(self, idx, w):
        return self.op("other", lambda w, r: F.embedding(idx, w), w)


def rnd_ag(z):
    return Q(z)


class _Softmax(torch.autograd.Function):
    """softmax over the last axis, float32 inside; with bf16=True the output
    saved for backward is the bf16-rounded one, as CUDA's bf16 softmax saves
    (and softmax_backward_data reads) its bf16 result:
    gx = y * (g - sum(g * y)) in float32, rounded once (by the caller's Q)."""

    @staticmethod
    def forward(ctx, x, bf16):
        y = torch.softmax(x, -1)
        if bf16:
            y = rnd(y)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return y * (g - (g * y).sum(-1, keepdim=True)), None


# ---------------------------------------------------------------- models
PARAMS = {
    "mlp": ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "norm.weight", "norm.bias",
            "head.weight", "head.bias"],
    "cnn": ["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "head.weight", "head.bias"],
}
PARAMS["gpt"] = ["tok.weight", "pos.weight"] + [
    f"blocks.{i}.{n}" for i in range(2) for n in
    ["ln1.weight", "ln1.bias", "qkv.weight", "qkv.bias", "proj.weight", "proj.bias",
     "ln2.weight", "ln2.bias", "fc.weight", "fc.bias", "out.weight", "out.bias"]] + [
    "ln_f.weight", "ln_f.bias", "head.weight"]
STEPS = {"mlp": 60, "cnn": 40, "gpt": 40}


def forward(model, M, P, x):
    """x: T (mlp/cnn, already cast to the input dtype) or token ids (gpt). Returns logits T."""
    if model == "mlp":
        h = M.gelu(M.linear(x, P["fc1.weight"], P["fc1.bias"]))
        h = M.linear(h, P["fc2.weight"], P["fc2.bias"])
        h = M.gelu(M.layer_norm(h, P["norm.weight"], P["norm.bias"]))
        return M.linear(h, P["head.weight"], P["head.bias"])
    if model == "cnn":
        h = M.relu(M.conv2d(x, P["conv1.weight"], P["conv1.bias"], 1, 1))
        h = M.relu(M.conv2d(h, P["conv2.weight"], P["conv2.bias"], 2, 1))
        h = h.reshape(h.t.shape[0], -1)  # (C,H,W) order
        return M.linear(h, P["head.weight"], P["head.bias"])
    if model == "gpt":
        B, Tn = x.shape
        h = M.add(M.embedding(x, P["tok.weight"]), M.embedding(torch.arange(Tn), P["pos.weight"]))
        mask = torch.triu(torch.ones(Tn, Tn, dtype=torch.bool), diagonal=1)
        for i in range(2):
            p = lambda n: P[f"blocks.{i}.{n}"]
            a = M.layer_norm(h, p("ln1.weight"), p("ln1.bias"))
            qkv = M.linear(a, p("qkv.weight"), p("qkv.bias"))
            q, k, v = qkv.split(32, 2)
            q, k, v = [z.view(B, Tn, 2, 16).transpose(1, 2) for z in (q, k, v)]
            att = M.mul_scalar(M.matmul(q, k.transpose(-2, -1)), 1.0 / math.sqrt(16))
            att = M.softmax(M.masked_fill(att, mask, float("-inf")))
            y = M.matmul(att, v).transpose(1, 2).reshape(B, Tn, 32)
            h = M.add(h, M.linear(y, p("proj.weight"), p("proj.bias")))
            a = M.layer_norm(h, p("ln2.weight"), p("ln2.bias"))
            a = M.linear(M.gelu(M.linear(a, p("fc.weight"), p("fc.bias"))), p("out.weight"), p("out.bias"))
            h = M.add(h, a)
        h = M.layer_norm(h, P["ln_f.weight"], P["ln_f.bias"])
        return M.linear(h, P["head.weight"])
    raise ValueError(model)


def batch(refs, model, s):
    if model == "mlp":
        o = (64 * s) % 512
        return refs["mlp.x"][o:o + 64], refs["mlp.y"][o:o + 64]
    if model == "cnn":
        o = (32 * s) % 256
        return refs["cnn.x"][o:o + 32], refs["cnn.y"][o:o + 32]
    tok = refs["gpt.tokens"]
    offs = [(131 * s + 509 * j) % 4079 for j in range(8)]
    return (torch.stack([tok[o:o + 16] for o in offs]), torch.stack([tok[o + 1:o + 17] for o in offs]))


# ---------------------------------------------------------------- AdamW
LR, B1, B2, EPS, WD = 3e-3, 0.9, 0.95, 1e-8, 0.1


def f32(s):
    return float(np.float32(s))


def fma(a, b, c):
    """float32 fma(a, b, c): a*b is exact in float64; one rounding of the sum
    (float64, then float32: a double rounding that differs from a true fma
    only when the float64 sum lands exactly on a float32 tie)."""
    a = a.double() if torch.is_tensor(a) else a
    return (a * b.double() + c.double()).to(F32)


@torch.no_grad()
def adamw_step(params, state, t, bf16):
    r = rnd if bf16 else (lambda z: z)
    bc1 = 1 - B1 ** t
    bc2 = 1 - B2 ** t
    step_size = LR / bc1
    bc2_sqrt = bc2 ** 0.5
    inv_bc2_sqrt = f32(1.0 / bc2_sqrt)  # CUDA div_true by a CPU scalar: a * f32(1/(double)b)
    for name, p in params.items():
        g = p.grad
        m, v = state[name]
        p.copy_(r(p * f32(1 - LR * WD)))                       # mul_
        m.copy_(r(fma(f32(1 - B1), g - m, m)))                 # lerp_: self + w*(end-self), nvcc contracts to fma
        v.copy_(r(v * f32(B2)))                                # mul_
        v.copy_(r(fma(f32(1 - B2), g * g, v)))                 # addcmul_: fma(alpha, t1*t2, self)
        d = r(torch.sqrt(v))                                   # sqrt
        d = r(d * inv_bc2_sqrt)                                # / bias_correction2_sqrt
        d = r(d + f32(EPS))                                    # add_
        p.copy_(r(fma(f32(-step_size), m / d, p)))             # addcdiv_: fma(alpha, t1/t2, self)


# ---------------------------------------------------------------- training
def train(refs, model, run, steps, dump_step0=None):
    M = Mode(run)
    bf = M.param_dt == "bf16"
    P, params, state = {}, {}, {}
    for n in PARAMS[model]:
        w = refs[f"{model}.init.{n}"].to(F32).clone()
        if bf:
            w = rnd(w)
        w.requires_grad_(True)
        params[n] = w
        P[n] = T(w, M.param_dt)
        state[n] = (torch.zeros_like(w, requires_grad=False), torch.zeros_like(w, requires_grad=False))
    losses = []
    for s in range(steps):
        xb, yb = batch(refs, model, s)
        if model == "gpt":
            x = xb
        else:
            xt = xb.to(F32)
            x = T(rnd(xt) if M.input_dt == "bf16" else xt, M.input_dt)
        logits = forward(model, M, P, x)
        lg = cast(logits, "f32").t  # Fabric's convert_output: float32 logits
        loss = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), yb.reshape(-1))
        loss.backward()
        losses.append(float(loss.item()))
        if s == 0 and dump_step0 is not None:
            dump_step0.update({"loss": float(loss.item()),
                               "grad_norms": {n: float(p.grad.double().norm()) for n, p in params.items()},
                               "logits_sum": float(lg.double().sum())})
        adamw_step(params, state, s + 1, bf)
        for p in params.values():
            p.grad = None
    norms = {n: float(p.detach().double().norm()) for n, p in params.items()}
    return losses, norms


def rel_errs(got, want):
    out = []
    for g, w in zip(got, want):
        if w is None or not math.isfinite(g):
            out.append(None if (w is None) == (not math.isfinite(g)) else float("inf"))
        else:
            out.append(abs(g - w) / abs(w))
    return out


TOL = {"32-true": (1e-4, 1e-4), "bf16-mixed": (2e-5, 2e-3), "bf16-true": (1e-4, 1e-2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", default=os.path.join(HERE, "..", "reference"))
    ap.add_argument("--out", default=HERE)
    args = ap.parse_args()
    refs = load_safetensors(os.path.join(args.ref, "refs.safetensors"))
    ref_traj = json.load(open(os.path.join(args.ref, "trajectories.json")))

    validation, new_runs, ok = {}, {}, True
    jobs = [("mlp", "32-true"), ("mlp", "bf16-mixed"), ("mlp", "bf16-true"),
            ("cnn", "32-true"), ("cnn", "bf16-mixed"), ("cnn", "bf16-true"),
            ("gpt", "32-true"), ("gpt", "bf16-mixed"), ("gpt", "bf16-true")]
    for model, run in jobs:
        step0 = {}
        losses, norms = train(refs, model, run, STEPS[model], step0)
        entry = {"losses": losses, "step0": step0}
        cuda = ref_traj["models"][model]["runs"].get(run)
        if cuda is not None:
            e = rel_errs(losses, cuda["losses"])
            first, rest = TOL[run]
            fin = [x for x in e if x is not None]
            entry.update({"rel_err_vs_cuda": e, "max_rel_step0": e[0], "max_rel_all": max(fin),
                          "tolerance": [first, rest],
                          "within": bool(e[0] <= min(first, rest) and max(fin) <= rest)})
            ok &= entry["within"]
            print(f"{model:4s} {run:10s} vs CUDA: step0 rel {e[0]:.3g}  max rel {max(fin):.3g}  "
                  f"tol ({first:g},{rest:g})  {'OK' if entry['within'] else 'FAIL'}")
        else:
            new_runs.setdefault(model, {})[run] = {
                "losses": losses, "loss_scale": [None] * len(losses),
                "plugin": "cpu-oracle (torch %s CPU, emulated CUDA %s)" % (torch.__version__, run),
                "final_norms": norms}
            print(f"{model:4s} {run:10s} new: step0 {losses[0]:.9g} last {losses[-1]:.9g}")
        validation[f"{model}/{run}"] = entry

    out = json.loads(json.dumps(ref_traj))
    for model, runs in new_runs.items():
        for run, r in runs.items():
            assert run not in out["models"][model]["runs"], (model, run)
            out["models"][model]["runs"][run] = r
    out["generated_by"] = dict(ref_traj.get("generated_by", {}))
    out["generated_by"]["cpu_oracle"] = {
        "script": "testdata/cpu-oracle/make_trajectories.py", "torch": torch.__version__,
        "runs_added": {m: sorted(r) for m, r in new_runs.items()},
        "note": "runs not listed in runs_added are the CUDA reference's, unchanged"}
    with open(os.path.join(args.out, "trajectories.json"), "w") as f:
        json.dump(out, f, indent=1, allow_nan=False)
        f.write("\n")
    with open(os.path.join(args.out, "validation.json"), "w") as f:
        json.dump(validation, f, indent=1, allow_nan=False)
        f.write("\n")
    print("validation", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
