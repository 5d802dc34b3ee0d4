#!/usr/bin/env python3
"""Time the training steps `weft bench step` times, in PyTorch on the CPU.

The same models (mlp784, mlp, cnn, gpt), batch shapes and AdamW settings, in
float32 and in bfloat16 autocast; prints one JSON object like weft's:
{"step": [{"model": ..., "precision": "32-true"|"bf16-mixed", "ms": ...,
"threads": ...}]}, ms the median step, each the faster of PyTorch on 1 thread
and on every core.

  torch_step.py STEPS --gpt 6,384,6,256 --batch 8 --precision bf16-mixed

times one gpt of that size (layers,width,heads,context; the Go corpus's
98-token vocabulary, as `weft bench step --gpt`) on torch.get_num_threads()
threads (compare.sh sets OPENBLAS_NUM_THREADS and OMP_NUM_THREADS to the count
it tries) and adds params and peak_rss (the process's, in bytes) to its entry.
Run by compare.sh; needs Debian's python3-torch.
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNorm(nn.LayerNorm):
    """LayerNorm in float32, as CUDA autocast runs it (PyTorch 1.13's CPU
    autocast leaves it to fail on bfloat16 inputs)."""

    def forward(self, x):
        return super().forward(x.float())


class MLP784(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.head = nn.Linear(784, 1024), nn.Linear(1024, 1024), nn.Linear(1024, 10)

    def forward(self, x):
        return self.head(F.relu(self.fc2(F.relu(self.fc1(x)))))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.norm, self.head = nn.Linear(32, 64), nn.Linear(64, 64), LayerNorm(64), nn.Linear(64, 10)

    def forward(self, x):
        return self.head(F.gelu(self.norm(self.fc2(F.gelu(self.fc1(x))))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.head = nn.Linear(576, 10)

    def forward(self, x):
        return self.head(F.relu(self.conv2(F.relu(self.conv1(x)))).flatten(1))


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.qkv, self.proj = LayerNorm(c), nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.ln2, self.fc, self.out = LayerNorm(c), nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(c // self.heads))
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """weft's gpt: the reference size (vocab 48, context 16, width 32, 2 heads,
    2 layers) unless sized."""

    def __init__(self, vocab=48, context=16, width=32, heads=2, layers=2):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.ln_f, self.head = LayerNorm(width), nn.Linear(width, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x)).flatten(0, 1)


CORPUS_VOCAB = 98  # weft's data.VocabSize


def batch(model, gpt=None, batch_size=0):
    g = torch.Generator().manual_seed(7)
    if gpt is not None:
        t = gpt[3]
        return (torch.randint(0, CORPUS_VOCAB, (batch_size, t), generator=g),
                torch.randint(0, CORPUS_VOCAB, (batch_size * t,), generator=g))
    if model == "mlp784":
        return torch.randn(64, 784, generator=g), torch.randint(0, 10, (64,), generator=g)
    if model == "mlp":
        return torch.randn(64, 32, generator=g), torch.randint(0, 10, (64,), generator=g)
    if model == "cnn":
        return torch.randn(32, 1, 12, 12, generator=g), torch.randint(0, 10, (32,), generator=g)
    return torch.randint(0, 48, (8, 16), generator=g), torch.randint(0, 48, (128,), generator=g)


def time_step(m, x, y, precision, steps):
    """The median ms of steps training steps of m on (x, y), after 3 warm-up steps."""
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
            logits = m(x)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def best(name, precision, steps):
    """The fastest of 1 thread and one per core: on small VMs PyTorch's
    OpenMP threads can slow it down, so it gets whichever is faster."""
    runs = []
    for threads in sorted({1, os.cpu_count() or 1}):
        torch.set_num_threads(threads)
        m = {"mlp784": MLP784, "mlp": MLP, "cnn": CNN, "gpt": GPT}[name]()
        runs.append((time_step(m, *batch(name), precision, steps), threads))
    ms, threads = min(runs)
    return {"model": name, "precision": precision, "ms": ms, "threads": threads}


def sized_gpt(gpt, batch_size, precision, steps):
    layers, width, heads, context = gpt
    m = GPT(CORPUS_VOCAB, context, width, heads, layers)
    ms = time_step(m, *batch("gpt", gpt, batch_size), precision, steps)
    return {"model": "gpt", "precision": precision, "batch": batch_size, "ms": ms,
            "threads": torch.get_num_threads(), "params": sum(p.numel() for p in m.parameters()),
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("steps", type=int, nargs="?", default=20)
    ap.add_argument("--gpt", help="layers,width,heads,context")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--precision", default="32-true", choices=("32-true", "bf16-mixed"))
    args = ap.parse_args()
    if args.gpt:
        out = [sized_gpt([int(v) for v in args.gpt.split(",")], args.batch, args.precision, args.steps)]
    else:
        out = [best(m, p, args.steps) for m in ("mlp784", "mlp", "cnn", "gpt") for p in ("32-true", "bf16-mixed")]
    json.dump({"torch": torch.__version__, "step": out}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
