"""PyTorch oracle for weft's HF layouts (models/hf): GPT-2 and Llama
forward passes written out in plain torch (no transformers library), as
transformers' GPT2LMHeadModel and LlamaForCausalLM compute them in eager
mode, with a plain safetensors reader and writer.

  oracle.py make gpt2|llama DIR [--tied] [--act ACT] [--kv N] [, gpt2|llama DIR ...]
      random weights -> DIR/config.json, DIR/model.safetensors and
      DIR/reference.safetensors (tokens [B, T] int64, logits [B, T, V] f32)
  oracle.py run DIR IN OUT [, DIR IN OUT ...]
      the model in DIR (config.json + model.safetensors, as weft exports
      it) on the tokens of IN -> OUT (tokens and logits)

A "," separates jobs, so that one start of Python (and of torch, which
takes seconds) serves them all.

Runs on Debian's python3-torch (1.13, CPU), which has no RMSNorm: Llama's
is written out below as HF's LlamaRMSNorm computes it.
"""
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64, "F64": torch.float64}
NAMES = {v: k for k, v in DTYPES.items()}


def read_safetensors(path):
    with open(path, "rb") as f:
        b = f.read()
    (n,) = struct.unpack("<Q", b[:8])
    header = json.loads(b[8 : 8 + n])
    data = b[8 + n :]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        s, t = e["data_offsets"]
        raw = bytearray(data[s:t])
        dt = DTYPES[e["dtype"]]
        out[name] = torch.frombuffer(raw, dtype=dt).reshape(e["shape"]) if raw else torch.empty(e["shape"], dtype=dt)
    return out


def write_safetensors(path, tensors):
    header, chunks, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().numpy().tobytes() if t.dtype != torch.bfloat16 else t.contiguous().view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


def causal_attention(q, k, v):
    """softmax(q·kᵀ/√hs, causal) · v for (B, nh, T, hs), masked as HF does."""
    t = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    att = att.masked_fill(~torch.tril(torch.ones(t, t, dtype=torch.bool)), float("-inf"))
    return att.softmax(dim=-1) @ v


def gelu_new(x):
    """HF's NewGELUActivation (GPT-2's tanh approximation)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gpt2_forward(cfg, w, ids):
    p = "transformer." if "transformer.wte.weight" in w else ""
    c, nh, eps = cfg["n_embd"], cfg["n_head"], cfg.get("layer_norm_epsilon", 1e-5)
    act = gelu_new if cfg.get("activation_function", "gelu_new") in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast") else F.gelu
    b, t = ids.shape
    x = w[p + "wte.weight"][ids] + w[p + "wpe.weight"][:t]
    for i in range(cfg["n_layer"]):
        h = f"{p}h.{i}."
        a = F.layer_norm(x, (c,), w[h + "ln_1.weight"], w[h + "ln_1.bias"], eps)
        qkv = a @ w[h + "attn.c_attn.weight"] + w[h + "attn.c_attn.bias"]  # Conv1D: x·W + b, W [in, out]
        q, k, v = (z.view(b, t, nh, c // nh).transpose(1, 2) for z in qkv.split(c, dim=2))
        y = causal_attention(q, k, v).transpose(1, 2).reshape(b, t, c)
        x = x + y @ w[h + "attn.c_proj.weight"] + w[h + "attn.c_proj.bias"]
        m = F.layer_norm(x, (c,), w[h + "ln_2.weight"], w[h + "ln_2.bias"], eps)
        m = act(m @ w[h + "mlp.c_fc.weight"] + w[h + "mlp.c_fc.bias"])
        x = x + m @ w[h + "mlp.c_proj.weight"] + w[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (c,), w[p + "ln_f.weight"], w[p + "ln_f.bias"], eps)
    head = w[p + "wte.weight"] if cfg.get("tie_word_embeddings", True) else w["lm_head.weight"]
    return x @ head.T


def rms_norm(x, weight, eps):
    """HF's LlamaRMSNorm in float32."""
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def repeat_kv(x, g):
    """HF's repeat_kv: (B, nkv, T, hs) -> (B, nkv·g, T, hs), each head g times in a row."""
    b, nkv, t, hs = x.shape
    return x[:, :, None].expand(b, nkv, g, t, hs).reshape(b, nkv * g, t, hs)


def llama_forward(cfg, w, ids):
    c, nh, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg.get("rms_norm_eps", 1e-6)
    nkv = cfg.get("num_key_value_heads", nh)
    hs, b, t = c // nh, ids.shape[0], ids.shape[1]
    inv_freq = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, hs, 2).float() / hs))
    freqs = torch.outer(torch.arange(t).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()  # (T, hs)
    x = w["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        h = f"model.layers.{i}."
        a = rms_norm(x, w[h + "input_layernorm.weight"], eps)
        q, k, v = (
            (a @ w[h + f"self_attn.{n}_proj.weight"].T).view(b, t, heads, hs).transpose(1, 2)
            for n, heads in (("q", nh), ("k", nkv), ("v", nkv))
        )
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        y = causal_attention(q, repeat_kv(k, nh // nkv), repeat_kv(v, nh // nkv)).transpose(1, 2).reshape(b, t, c)
        x = x + y @ w[h + "self_attn.o_proj.weight"].T
        m = rms_norm(x, w[h + "post_attention_layernorm.weight"], eps)
        gate, up = m @ w[h + "mlp.gate_proj.weight"].T, m @ w[h + "mlp.up_proj.weight"].T
        x = x + (F.silu(gate) * up) @ w[h + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
    return x @ head.T


FORWARD = {"gpt2": gpt2_forward, "llama": llama_forward}


def random_model(layout, tied, act, nkv, g):
    """A small model of layout with random weights, scaled so that every
    part moves the logits (norm weights near 1, biases and embeddings O(1))."""
    v, ctx, c, nh, n, hid = 61, 16, 32, 4, 2, 80
    randn = lambda *shape, s=1.0: torch.randn(*shape, generator=g) * s
    near1 = lambda *shape: 1.0 + randn(*shape, s=0.2)
    w = {}
    if layout == "gpt2":
        cfg = {"model_type": "gpt2", "vocab_size": v, "n_positions": ctx, "n_embd": c, "n_head": nh, "n_layer": n,
               "layer_norm_epsilon": 1e-5, "activation_function": act, "tie_word_embeddings": tied}
        p = "transformer."
        w[p + "wte.weight"], w[p + "wpe.weight"] = randn(v, c), randn(ctx, c, s=0.5)
        for i in range(n):
            h = f"{p}h.{i}."
            for ln in ("ln_1", "ln_2"):
                w[h + ln + ".weight"], w[h + ln + ".bias"] = near1(c), randn(c, s=0.2)
            for name, i_, o in (("attn.c_attn", c, 3 * c), ("attn.c_proj", c, c), ("mlp.c_fc", c, 4 * c), ("mlp.c_proj", 4 * c, c)):
                w[h + name + ".weight"], w[h + name + ".bias"] = randn(i_, o, s=i_ ** -0.5), randn(o, s=0.1)
        w[p + "ln_f.weight"], w[p + "ln_f.bias"] = near1(c), randn(c, s=0.2)
    else:
        cfg = {"model_type": "llama", "vocab_size": v, "max_position_embeddings": ctx, "hidden_size": c,
               "num_attention_heads": nh, "num_key_value_heads": nkv, "num_hidden_layers": n, "intermediate_size": hid,
               "rms_norm_eps": 1e-5, "rope_theta": 500.0, "hidden_act": "silu", "tie_word_embeddings": tied}
        w["model.embed_tokens.weight"] = randn(v, c)
        for i in range(n):
            h = f"model.layers.{i}."
            w[h + "input_layernorm.weight"], w[h + "post_attention_layernorm.weight"] = near1(c), near1(c)
            for name, rows in (("q", c), ("k", nkv * c // nh), ("v", nkv * c // nh), ("o", c)):
                w[h + f"self_attn.{name}_proj.weight"] = randn(rows, c, s=c ** -0.5)
            w[h + "mlp.gate_proj.weight"], w[h + "mlp.up_proj.weight"] = randn(hid, c, s=c ** -0.5), randn(hid, c, s=c ** -0.5)
            w[h + "mlp.down_proj.weight"] = randn(c, hid, s=hid ** -0.5)
        w["model.norm.weight"] = near1(c)
    if not tied:
        w["lm_head.weight"] = randn(v, c, s=c ** -0.5)
    return cfg, w


def main(argv):
    if not argv:
        sys.exit(__doc__)
    torch.set_grad_enabled(False)
    job = []
    for a in argv[1:] + [","]:
        if a != ",":
            job.append(a)
            continue
        run_job(argv[0], job)
        job = []


def run_job(command, argv):
    if command == "make":
        layout, out = argv[0], argv[1]
        tied = "--tied" in argv
        act = argv[argv.index("--act") + 1] if "--act" in argv else "gelu_new"
        nkv = int(argv[argv.index("--kv") + 1]) if "--kv" in argv else 4
        g = torch.Generator().manual_seed(19)
        cfg, w = random_model(layout, tied, act, nkv, g)
        ids = torch.randint(0, cfg["vocab_size"], (2, 12), generator=g)
        with open(f"{out}/config.json", "w") as f:
            json.dump(cfg, f, indent=2)
        write_safetensors(f"{out}/model.safetensors", w)
        write_safetensors(f"{out}/reference.safetensors", {"tokens": ids, "logits": FORWARD[layout](cfg, w, ids)})
    elif command == "run":
        model, inp, out = argv[0:3]
        with open(f"{model}/config.json") as f:
            cfg = json.load(f)
        w = {k: t.float() for k, t in read_safetensors(f"{model}/model.safetensors").items()}
        ids = read_safetensors(inp)["tokens"]
        write_safetensors(out, {"tokens": ids, "logits": FORWARD[cfg["model_type"]](cfg, w, ids)})
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
