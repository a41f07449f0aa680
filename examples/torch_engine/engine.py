"""The continuous-batching engine of examples/torch_worker.py: sequences
take a KV slot when added, are prefilled at the next step and decode one
token a step until done or dropped (an abort). Knows nothing of fairsched.

With a prefix cache (``cache_blocks`` > 0, as vLLM's automatic prefix
caching): the keys and values of every whole block of ``block_tokens``
prompt positions a prefill computed are kept, keyed by the prompt's block
hash chain (given with the sequence), least recently used evicted first. A
later prompt whose leading blocks are held gets their keys and values
copied into its slot and prefills only the rest -- the cached positions'
compute is skipped for real. Each step reports the blocks it stored and
evicted (the worker sends them to the daemon as KV events).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional

import torch

from .model import Model, ModelConfig


@dataclass
class Sequence:
    id: int
    slot: int
    prompt: list[int]
    max_output_tokens: int
    kv_tokens: int  # reserved for it: what the daemon counts, prompt + max output
    generated: int = 0
    last: Optional[torch.Tensor] = None  # the last token, still on the device
    chain: list[int] = field(default_factory=list)  # its prompt's block hashes (prefix cache)


@dataclass
class StepResult:
    tokens: list[tuple[int, int]] = field(default_factory=list)  # (sequence id, token)
    finished: list[Sequence] = field(default_factory=list)
    prefilled: int = 0
    decoded: int = 0
    prefill_tokens: int = 0  # prompt positions computed
    cached_tokens: int = 0  # prompt positions whose keys and values came from the cache
    stored: list[int] = field(default_factory=list)  # block hashes cached this step
    removed: list[int] = field(default_factory=list)  # and evicted


class Engine:
    """The continuous-batching engine: sequences join between steps and leave
    when done or aborted. Not thread-safe: one loop drives it."""

    def __init__(self, cfg: ModelConfig, cache_blocks: int = 0, block_tokens: int = 16) -> None:
        self.cfg = cfg
        self.model = Model(cfg).eval()
        self.cache_blocks = cache_blocks
        self.block_tokens = block_tokens
        # block hash -> its keys and values per layer, most recently used last
        self.cache: OrderedDict[int, list[tuple[torch.Tensor, torch.Tensor]]] = OrderedDict()
        self.kv_budget = min(cfg.kv_tokens, cfg.max_sequences * cfg.max_context)
        self.free_slots = list(range(cfg.max_sequences - 1, -1, -1))
        self.waiting: list[Sequence] = []  # assigned, not prefilled yet
        self.running: dict[int, Sequence] = {}
        self.reserved = 0

    def capacity(self) -> tuple[int, int]:
        """(free sequences, free KV tokens): what the engine can take now."""
        return len(self.free_slots), self.kv_budget - self.reserved

    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def fits(self, prompt_tokens: int, max_output_tokens: int) -> Optional[str]:
        """None when a request of this shape can ever run here, else why not."""
        need = max(prompt_tokens, 1) + max_output_tokens
        if need > self.cfg.max_context:
            return f"prompt + output = {need} tokens exceed the model's context of {self.cfg.max_context}"
        return None

    def add(self, rid: int, prompt: list[int], prompt_tokens: int, max_output_tokens: int,
            chain: Optional[list[int]] = None) -> None:
        """REQUIRES: a free slot, room in the KV budget and fits() is None.
        ``chain``: the prompt's block hashes, for the prefix cache."""
        vocab = self.cfg.vocab
        if prompt:
            ids = [t % vocab for t in prompt]
        else:  # counts only (or an empty prompt): as many tokens, made up
            ids = [(rid + j) % vocab for j in range(max(prompt_tokens, 1))]
        seq = Sequence(rid, self.free_slots.pop(), ids, max_output_tokens,
                       prompt_tokens + max_output_tokens)
        if self.cache_blocks > 0 and chain:
            seq.chain = list(chain[: len(ids) // self.block_tokens])
        self.reserved += seq.kv_tokens
        self.waiting.append(seq)

    def drop(self, rid: int) -> Optional[Sequence]:
        """Removes a sequence (an abort); None when it is not here (already finished)."""
        seq = self.running.pop(rid, None)
        if seq is None:
            for i, s in enumerate(self.waiting):
                if s.id == rid:
                    seq = self.waiting.pop(i)
                    break
        if seq is not None:
            self._release(seq)
        return seq

    def _prefill(self, seq: Sequence, out: StepResult) -> torch.Tensor:
        """Prefills ``seq``, its cached leading blocks copied in, not computed."""
        bt = self.block_tokens
        held = 0
        for h in seq.chain:
            kv = self.cache.get(h)
            if kv is None:
                break
            self.model.put_kv(seq.slot, held * bt, kv)
            held += 1
        start = min(held * bt, len(seq.prompt) - 1)  # the last position makes the first token
        first = self.model.prefill(seq.slot, seq.prompt, start)
        out.prefill_tokens += len(seq.prompt) - start
        out.cached_tokens += start
        for i in range(held, len(seq.chain)):
            h = seq.chain[i]
            if h not in self.cache:
                self.cache[h] = self.model.block_kv(seq.slot, i * bt, bt)
                out.stored.append(h)
        # Last block first: a prompt's leading blocks are the last of it to go
        # (without its first block the rest cannot be reached).
        for h in reversed(seq.chain):
            if h in self.cache:
                self.cache.move_to_end(h)
        while len(self.cache) > self.cache_blocks:
            gone, _ = self.cache.popitem(last=False)
            out.removed.append(gone)
        return first

    def _release(self, seq: Sequence) -> None:
        self.free_slots.append(seq.slot)
        self.reserved -= seq.kv_tokens

    @torch.inference_mode()
    def step(self) -> StepResult:
        """Prefills the waiting sequences, then decodes one token of every
        running one; returns the tokens produced and the sequences done."""
        out = StepResult()
        decode = list(self.running.values())
        firsts: list[tuple[Sequence, torch.Tensor]] = []
        for seq in self.waiting:
            firsts.append((seq, self._prefill(seq, out)))
        out.prefilled = len(firsts)
        self.waiting.clear()
        nxt: Optional[torch.Tensor] = None
        if decode:
            last = torch.stack([s.last for s in decode])  # type: ignore[misc]
            nxt = self.model.decode([s.slot for s in decode], last,
                                    [len(s.prompt) + s.generated - 1 for s in decode])
            out.decoded = len(decode)
        # One copy to the host per step.
        host: list[int] = []
        if firsts:
            host += torch.stack([t for _, t in firsts]).tolist()
        if nxt is not None:
            host += nxt.tolist()
        produced = [s for s, _ in firsts] + decode
        for i, seq in enumerate(produced):
            out.tokens.append((seq.id, host[i]))
            seq.generated += 1
            if i < len(firsts):
                seq.last = firsts[i][1]
                self.running[seq.id] = seq
            else:
                assert nxt is not None
                seq.last = nxt[i - len(firsts)]
            if seq.generated == seq.max_output_tokens:
                del self.running[seq.id]
                self._release(seq)
                out.finished.append(seq)
        return out
