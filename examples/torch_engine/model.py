"""The model of examples/torch_worker.py: a decoder-only transformer with
random weights (seeded) and a KV cache pooled in slots, one per sequence.

It models the compute and memory behaviour of a real model's serving loop --
the matrix multiplies, the attention over a growing KV cache, the batch
shapes -- not its text: its tokens are the argmax of random logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    layers: int = 2
    width: int = 64
    heads: int = 4
    vocab: int = 512
    max_context: int = 512  # KV positions per sequence (prompt + output)
    max_sequences: int = 8  # KV slots: sequences in flight at once
    kv_tokens: int = 4096  # KV tokens the engine offers in all (<= slots * context)
    device: str = "cpu"
    dtype: str = "float32"
    seed: int = 1


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = width // heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def _split(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, _ = h.shape
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return q, k, v  # each [b, heads, t, head_dim]

    def _merge(self, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = att.shape
        x = x + self.out(att.transpose(1, 2).reshape(b, t, -1))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))

    def prefill(self, x: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, slot: int,
                start: int = 0) -> torch.Tensor:
        """x: [1, n, width], the prompt of the sequence in ``slot`` from
        position ``start`` on; positions before it are in the slot's cache
        already (a cached prefix)."""
        q, k, v = self._split(self.ln1(x))
        n = x.shape[1]
        t = start + n
        kc[slot, :, start:t] = k[0]
        vc[slot, :, start:t] = v[0]
        keys = kc[slot, :, :t][None]  # [1, heads, t, head_dim]
        values = vc[slot, :, :t][None]
        s = (q @ keys.transpose(-1, -2)) / math.sqrt(self.head_dim)  # [1, heads, n, t]
        rows = torch.arange(start, t, device=x.device)[:, None]
        causal = torch.arange(t, device=x.device)[None, :] > rows
        s = s.masked_fill(causal, float("-inf"))
        return self._merge(x, torch.softmax(s.float(), dim=-1).to(values.dtype) @ values)

    def decode(self, x: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, slots: torch.Tensor,
               pos: torch.Tensor, span: int) -> torch.Tensor:
        """x: [b, 1, width], one new token per sequence; ``pos`` where each
        goes in its slot; ``span``: 1 + the largest position."""
        q, k, v = self._split(self.ln1(x))
        kc[slots, :, pos] = k[:, :, 0]
        vc[slots, :, pos] = v[:, :, 0]
        keys = kc[slots, :, :span]  # [b, heads, span, head_dim]
        values = vc[slots, :, :span]
        s = (q @ keys.transpose(-1, -2)) / math.sqrt(self.head_dim)  # [b, heads, 1, span]
        later = torch.arange(span, device=x.device)[None, :] > pos[:, None]
        s = s.masked_fill(later[:, None, None, :], float("-inf"))
        return self._merge(x, torch.softmax(s.float(), dim=-1).to(values.dtype) @ values)


class Model(nn.Module):
    """Decoder-only transformer with random weights and a pooled KV cache."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.width % cfg.heads:
            raise ValueError(f"width {cfg.width} is not a multiple of heads {cfg.heads}")
        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        self.embed = nn.Embedding(cfg.vocab, cfg.width)
        self.position = nn.Embedding(cfg.max_context, cfg.width)
        self.blocks = nn.ModuleList(Block(cfg.width, cfg.heads) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.width)
        self.head = nn.Linear(cfg.width, cfg.vocab, bias=False)
        dtype: torch.dtype = getattr(torch, cfg.dtype)
        self.to(device=torch.device(cfg.device), dtype=dtype)
        shape = (cfg.max_sequences, cfg.heads, cfg.max_context, cfg.width // cfg.heads)
        self.k = [torch.zeros(shape, device=cfg.device, dtype=dtype) for _ in range(cfg.layers)]
        self.v = [torch.zeros(shape, device=cfg.device, dtype=dtype) for _ in range(cfg.layers)]

    def kv_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def prefill(self, slot: int, prompt: list[int], start: int = 0) -> torch.Tensor:
        """Fills ``slot``'s cache with ``prompt`` from position ``start`` on
        (those before it are there already); the first output token (a 0-d
        tensor)."""
        dev = self.cfg.device
        ids = torch.tensor(prompt[start:], device=dev, dtype=torch.long)
        pos = torch.arange(start, len(prompt), device=dev)
        x = self.embed(ids)[None] + self.position(pos)[None]
        for i, blk in enumerate(self.blocks):
            x = blk.prefill(x, self.k[i], self.v[i], slot, start)
        return self.head(self.ln_f(x[0, -1])).argmax()

    def block_kv(self, slot: int, first: int, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """A copy of ``slot``'s keys and values at positions [first, first + n), per layer."""
        return [(k[slot, :, first:first + n].clone(), v[slot, :, first:first + n].clone())
                for k, v in zip(self.k, self.v)]

    def put_kv(self, slot: int, first: int, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Writes block_kv()'s copy into ``slot`` from position ``first``."""
        for (k, v), (bk, bv) in zip(zip(self.k, self.v), kv):
            n = bk.shape[1]
            k[slot, :, first:first + n] = bk
            v[slot, :, first:first + n] = bv

    def decode(self, slots: list[int], tokens: torch.Tensor, positions: list[int]) -> torch.Tensor:
        """One token for each sequence: ``tokens`` [b] at ``positions``; the next tokens [b]."""
        dev = self.cfg.device
        s = torch.tensor(slots, device=dev, dtype=torch.long)
        p = torch.tensor(positions, device=dev, dtype=torch.long)
        x = (self.embed(tokens) + self.position(p))[:, None]
        span = max(positions) + 1
        for i, blk in enumerate(self.blocks):
            x = blk.decode(x, self.k[i], self.v[i], s, p, span)
        return self.head(self.ln_f(x[:, 0])).argmax(dim=-1)
