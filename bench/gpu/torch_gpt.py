#!/usr/bin/env python3
"""PyTorch's side of the GPU training benchmark (bench/gpu/gpt_side_by_side.sh).

The GPT chorus-train trains (GPT-2's layout: token and position embeddings, pre-LayerNorm blocks
with causal self-attention and a GELU (tanh) MLP, a final LayerNorm, the lm_head tied to the token
embedding; no dropout, no bias decay), trained as chorus-train trains it: bf16 or f32 autocast,
AdamW (fused), global-norm clipping at 1.0, one fresh batch of random tokens per step. Attention
is PyTorch's scaled_dot_product_attention (its flash kernel on these GPUs): what a PyTorch user
gets. --compile wraps the model in torch.compile.

Prints one line: `result tokens_per_s=... step_ms=... peak_bytes=... params=...`, the median of
the timed steps after the warm-up.
"""
import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width)
        self.c_attn = nn.Linear(width, 3 * width)
        self.attn_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.mlp_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):  # PyTorch 2
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # older PyTorch (a check of this script on a CPU)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, context, layers, heads, width):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied lm_head
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("result error=no CUDA device for PyTorch", flush=True)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # chorus's default: f32 without TF32
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    torch.manual_seed(1234)
    model = GPT(a.vocab, a.context, a.layers, a.heads, a.width).to(dev)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-4, fused=True)
    step_fn = torch.compile(model) if a.compile else model
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.dtype == "bf16")
    gen = torch.Generator(device=dev).manual_seed(1)
    times = []
    torch.cuda.reset_peak_memory_stats()
    for step in range(a.warmup + a.steps):
        x = torch.randint(0, 256, (a.batch, a.context + 1), device=dev, generator=gen)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with autocast:
            loss = step_fn(x[:, :-1], x[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_value = loss.item()  # as chorus-train reads its loss every step
        torch.cuda.synchronize()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
        if not math.isfinite(loss_value):
            print(f"result error=loss {loss_value} at step {step}", flush=True)
            return 1
    step_s = statistics.median(times)
    print(f"result tokens_per_s={a.batch * a.context / step_s:.0f} step_ms={1e3 * step_s:.2f} "
          f"peak_bytes={torch.cuda.max_memory_allocated()} params={params} loss={loss_value:.4f}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
