#!/usr/bin/python3
"""How far apart do semantically equivalent bf16 replays drift?

Replays the low-precision runs of make_trajectories.py with perturbations that
do not change the README's semantics, only float32 rounding inside an op
(summation order / precision of the accumulation, fma vs separate mul+add in
AdamW). Any such change flips the bf16 rounding of a few elements, and those
flips grow chaotically over the steps. The spread printed here is the noise
floor an engine with exactly the CUDA semantics must still expect against a
reference: `max rel` of a variant vs the base oracle (and vs CUDA for mlp).
Writes noise_floor.json.   Run: /usr/bin/python3 noise_floor.py
"""
import json, os, sys
import torch
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_trajectories as mt

refs = mt.load_safetensors(os.path.join(HERE, "refs.safetensors"))
cuda = json.load(open(os.path.join(HERE, "..", "reference", "trajectories.json")))["models"]
orig_op, orig_fma = mt.Mode.op, mt.fma


def f64_lowp(self, cat, fn, *xs):
    if cat == "lowp":  # accumulate linear/matmul/conv in float64 instead of float32
        f0 = fn
        fn = lambda *a, r: f0(*[x.double() if torch.is_tensor(x) and x.is_floating_point() else x for x in a], r=r).float()
    return orig_op(self, cat, fn, *xs)


def f64_all(self, cat, fn, *xs):  # every op's inside in float64
    f0 = fn
    fn = lambda *a, r: f0(*[x.double() if torch.is_tensor(x) and x.is_floating_point() else x for x in a], r=r).float()
    return orig_op(self, cat, fn, *xs)


VARIANTS = {
    "lowp-accumulate-f64": dict(op=f64_lowp),
    "all-ops-inside-f64": dict(op=f64_all),
    "adamw-no-fma": dict(fma=lambda a, b, c: c + a * b),
}
RUNS = [("mlp", "bf16-mixed"), ("mlp", "bf16-true"), ("cnn", "bf16-mixed"), ("cnn", "bf16-true"),
        ("gpt", "bf16-mixed"), ("gpt", "bf16-true")]


def rel(a, b):
    e = [abs(x - y) / abs(y) for x, y in zip(a, b)]
    return e[0], max(e)


def main():
    base = {r: mt.train(refs, *r, mt.STEPS[r[0]])[0] for r in RUNS}
    out = {}
    for name, v in VARIANTS.items():
        mt.Mode.op, mt.fma = v.get("op", orig_op), v.get("fma", orig_fma)
        for r in RUNS:
            L = mt.train(refs, *r, mt.STEPS[r[0]])[0]
            row = {"vs_oracle": rel(L, base[r])}
            if r[1] in cuda[r[0]]["runs"]:
                row["vs_cuda"] = rel(L, cuda[r[0]]["runs"][r[1]]["losses"])
            out[f"{r[0]}/{r[1]}/{name}"] = row
            print(f"{r[0]}/{r[1]:10s} {name:20s} vs oracle: step0 {row['vs_oracle'][0]:.2e} max {row['vs_oracle'][1]:.2e}"
                  + (f"   vs CUDA: step0 {row['vs_cuda'][0]:.2e} max {row['vs_cuda'][1]:.2e}" if "vs_cuda" in row else ""))
        mt.Mode.op, mt.fma = orig_op, orig_fma
    json.dump(out, open(os.path.join(HERE, "noise_floor.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
