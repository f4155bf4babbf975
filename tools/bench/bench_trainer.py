"""The Python PyTorch peer of tools/bench/bench_trainer.cc: the same GPT (pre-LayerNorm, causal
attention written out as nanoGPT does without flash attention, GELU MLP, tied unembedding, learned
positions), the same shapes and batch, AdamW with foreach=True (PyTorch's multi-tensor path).
On a GPU the peer is PyTorch at its best as a user would write it: attention through
F.scaled_dot_product_attention (flash), AdamW with fused=True, bf16 through torch.autocast, and
optionally torch.compile.

    python3 bench_trainer.py PRESET BATCH THREADS STEPS WARMUP [DEVICE [PRECISION [compile]]]
PRESET may be one of tools/export-model's files (gpt.pt, llama.pt, gru.pt): its module in eager mode.
Prints one JSON line like the C++ benchmark."""
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {  # d_model, n_layers, n_heads, seq_len, vocab: as core/scenario.cc
    "nano": (32, 2, 2, 64, 256),
    "tiny": (128, 4, 4, 128, 256),
    "small": (256, 6, 8, 256, 256),
    "medium": (512, 8, 8, 512, 256),
    "gpt2-124m": (768, 12, 12, 1024, 50257),
}


class Block(nn.Module):
    def __init__(self, d, h, t):
        super().__init__()
        self.h = h
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.tril(torch.ones(t, t)).view(1, 1, t, t))

    def attn(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.view(b, t, self.h, d // self.h).transpose(1, 2)
        k = k.view(b, t, self.h, d // self.h).transpose(1, 2)
        v = v.view(b, t, self.h, d // self.h).transpose(1, 2)
        if not x.is_cpu:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, d, layers, h, t, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(t, d)
        self.blocks = nn.ModuleList(Block(d, h, t) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx, targets):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight).float()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class WithLoss(nn.Module):
    """A module that returns logits, with the loss narrows computes from them."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, idx, targets):
        logits = self.inner(idx).float()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def ExportedModel(path):
    import importlib.machinery
    import importlib.util
    import os
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "export-model")
    loader = importlib.machinery.SourceFileLoader("export_model", source)
    spec = importlib.util.spec_from_loader("export_model", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    name = os.path.basename(path)[:-3]
    makers = {"gpt": lambda: module.Gpt(256, 128), "llama": lambda: module.Llama(256, 128),
              "gru": lambda: module.GruLm(256)}
    if name not in makers:
        sys.exit(f"bench_trainer.py: {path}: a Python twin exists only for {', '.join(makers)}.pt")
    return WithLoss(makers[name]())


def main():
    preset, batch, threads, steps, warmup = sys.argv[1], *map(int, sys.argv[2:6])
    device = torch.device(sys.argv[6] if len(sys.argv) > 6 else "cpu")
    precision = sys.argv[7] if len(sys.argv) > 7 else "fp32"
    compiled = len(sys.argv) > 8 and sys.argv[8] == "compile"
    gpu = device.type == "cuda"
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if preset.endswith(".pt"):
        # tools/export-model's module of the same name, in eager mode (not scripted).
        model, t, vocab = ExportedModel(preset), 128, 256
        model = model.to(device)
    else:
        d, layers, h, t, vocab = PRESETS[preset]
        model = GPT(d, layers, h, t, vocab).to(device)
    forward = torch.compile(model) if compiled else model
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), **({"fused": True} if gpu else {"foreach": True}))
    x = torch.randint(0, vocab, (batch, t), device=device)
    y = torch.randint(0, vocab, (batch, t), device=device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    step_s, opt_s = [], []
    for s in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast:
            loss = forward(x, y)
        loss.backward()
        t1 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
        t2 = time.perf_counter()
        if s >= warmup:
            step_s.append(t2 - t0)
            opt_s.append(t2 - t1)
    step_s.sort()
    opt_s.sort()
    tokens = batch * t
    print(json.dumps({"impl": "pytorch-compile" if compiled else "pytorch", "preset": preset,
                      "device": str(device), "precision": precision,
                      "params": sum(p.numel() for p in model.parameters()),
                      "tokens_per_s": tokens / step_s[0],
                      "median_tokens_per_s": tokens / step_s[len(step_s) // 2],
                      "step_ms": 1e3 * step_s[0], "optimizer_ms": 1e3 * opt_s[0]}))

if __name__ == "__main__":
    main()
