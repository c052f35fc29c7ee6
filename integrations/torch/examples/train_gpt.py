#!/usr/bin/python3
"""Trains a small GPT-2 style model data parallel (DistributedDataParallel) over chorus.

    PYTHONPATH=build/python torchrun --nproc_per_node 2 integrations/torch/examples/train_gpt.py
    ... train_gpt.py --backend gloo          # the same run over gloo: the same losses

Launch it with torchrun (or anything that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT):
the only chorus-specific lines are `import chorus_torch` and the backend name. Rank 0 prints
the loss of every step, then one line `LOSSES [...]`.

The model is the architecture of the repository's CPU anchor (../shared/anchors/torch_gpt):
token + position embedding; L blocks of [LayerNorm -> causal self-attention (fused qkv Linear,
proj Linear) -> residual; LayerNorm -> Linear(C, 4C) -> GELU(tanh) -> Linear(4C, C) -> residual];
final LayerNorm; untied head Linear(C, V, bias=False); cross-entropy. AdamW(lr 3e-4, weight
decay 0.1). Legend: B batch, T context, C width, H heads, V vocabulary, L layers.
"""
import argparse
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H, T):
        super().__init__()
        self.H = H
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fc2 = nn.Linear(4 * C, C)
        # An attribute, not a buffer: DDP would broadcast a buffer every step.
        self.causal = torch.tril(torch.ones(T, T, dtype=torch.bool))

    def attention(self, x):                      # x: (B, T, C)
        B, T, C = x.shape
        hs = C // self.H
        q, k, v = self.qkv(x).split(C, dim=2)     # each (B, T, C)
        q, k, v = (z.view(B, T, self.H, hs).transpose(1, 2) for z in (q, k, v))  # (B, H, T, hs)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)                          # (B, H, T, T)
        att = att.masked_fill(~self.causal[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, L, C, H):
        super().__init__()
        self.tok = nn.Embedding(V, C)
        self.pos = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, H, T) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.head = nn.Linear(C, V, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):             # idx, targets: (B, T) token ids
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))          # (B, T, V)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def batches(B, T, V, seed):
    """Endless (x, y) batches of a fixed random token stream; y is x shifted by one."""
    g = torch.Generator().manual_seed(seed)
    stream = torch.randint(0, V, (1 << 14,), generator=g)
    while True:
        i = torch.randint(0, len(stream) - T - 1, (B,), generator=g)
        x = torch.stack([stream[j:j + T] for j in i.tolist()])
        y = torch.stack([stream[j + 1:j + T + 1] for j in i.tolist()])
        yield x, y


def train(steps=20, V=256, T=32, L=2, C=64, H=4, B=4, seed=0, bucket_cap_mb=None, model_cls=GPT):
    """DDP training on the default group; returns this rank's losses and a checksum of the final
    parameters (equal on every rank when the gradients were all-reduced right)."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    rank = dist.get_rank()
    torch.manual_seed(1234)                       # the same initial model everywhere
    model = model_cls(V, T, L, C, H)
    kw = {} if bucket_cap_mb is None else {"bucket_cap_mb": bucket_cap_mb}
    ddp = DDP(model, **kw)
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-4, weight_decay=0.1)
    data = batches(B, T, V, seed + rank)          # each rank its own data
    losses = []
    for _ in range(steps):
        x, y = next(data)
        loss = ddp(x, y)
        loss.backward()                           # DDP all-reduces the gradients here
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return losses, flat.double().sum().item(), flat


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="chorus")
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    if args.backend == "chorus":
        import chorus_torch  # noqa: F401  registers the backend
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)         # env:// from torchrun
    losses, checksum, flat = train(steps=args.steps)
    same = flat.clone()
    dist.broadcast(same, src=0)
    identical = bool(torch.equal(same, flat))
    if dist.get_rank() == 0:
        for i, loss in enumerate(losses):
            print("step %d loss %.6f" % (i, loss))
        print("LOSSES %s" % losses)
    print("rank %d: parameters identical to rank 0's: %s" % (dist.get_rank(), identical))
    dist.destroy_process_group()
    if not identical:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
