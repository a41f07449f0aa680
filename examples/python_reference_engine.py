#!/usr/bin/env python3
"""A pure-Python continuous-batching engine serving a fairsched worker endpoint.

The Python twin of fairsched-worker (worker/reference_engine.cpp): it models
an inference engine (vLLM/SGLang style) and emits the documented reference
tokens, so a client can check that no token went to the wrong request:
output token j of prompt p is (p[j % len(p)] + j + 1) mod 2**32, and j + 1
for an empty prompt.

Per step: take assignments (each reserves prompt + max output tokens of KV)
and aborts; prefill waiting prompts within the chunked-prefill budget,
oldest first; every fully prefilled sequence decodes one token; the step
takes step_us + prefill_token_us * prompt tokens prefilled + decode_token_us
* sequences decoding of modelled time; then the new tokens are emitted,
finished sequences reported and the free capacity stated again.

A request's true output length is `output_tokens=N` in its params (ASCII,
e.g. b"output_tokens=17;temperature=0"), capped at max_output_tokens;
without it, max_output_tokens.

    python3 examples/python_reference_engine.py --socket /run/fairsched/fairsched.sock --endpoint chat

SIGTERM or SIGINT: finish the step, detach, exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from dataclasses import dataclass, field
from typing import Optional

import fairsched
from fairsched import AsyncWorker, Status, WorkItem, WorkKind

U32 = 0xFFFFFFFF


def reference_token(prompt: list[int], j: int) -> int:
    """Output token j of a request with this prompt."""
    base = prompt[j % len(prompt)] if prompt else 0
    return (base + j + 1) & U32


def output_tokens_param(params: bytes) -> int:
    """`output_tokens=N` from a params blob, at its start or after ';' or ' ';
    0 when absent or malformed."""
    key = b"output_tokens="
    at = params.find(key)
    while at > 0 and params[at - 1 : at] not in (b";", b" "):
        at = params.find(key, at + 1)
    if at < 0:
        return 0
    i = at + len(key)
    digits = b""
    while i < len(params) and 48 <= params[i] <= 57:
        digits += params[i : i + 1]
        i += 1
    if not digits or int(digits) > U32:
        return 0
    return int(digits)


@dataclass
class EngineModel:
    max_sequences: int = 64
    kv_tokens: int = 262144
    step_us: float = 200.0
    prefill_token_us: float = 0.02
    decode_token_us: float = 2.0
    chunked_prefill_tokens: int = 2048


@dataclass
class Sequence:
    id: int
    prompt: list[int]
    prompt_tokens: int
    target: int  # true output length
    reserved: int  # KV tokens
    prefilled: int = 0
    generated: int = 0


@dataclass
class EngineStats:
    steps: int = 0
    tokens: int = 0
    finished: int = 0
    aborted: int = 0


@dataclass
class Engine:
    worker: AsyncWorker
    model: EngineModel = field(default_factory=EngineModel)
    seqs: list[Sequence] = field(default_factory=list)
    kv_used: int = 0
    stats: EngineStats = field(default_factory=EngineStats)
    _stated: Optional[tuple[int, int]] = None

    def state_capacity(self) -> None:
        free_seqs = self.model.max_sequences - min(len(self.seqs), self.model.max_sequences)
        free_kv = self.model.kv_tokens - min(self.kv_used, self.model.kv_tokens)
        if (free_seqs, free_kv) != self._stated:
            self.worker.set_capacity(free_seqs, free_kv)
            self._stated = (free_seqs, free_kv)

    def take(self, items: list[WorkItem]) -> bool:
        """Applies assignments, aborts and preempts; True when a sequence was added."""
        took = False
        for item in items:
            if item.kind in (WorkKind.ABORT, WorkKind.PREEMPT):
                seq = next((s for s in self.seqs if s.id == item.id), None)
                if seq is None:
                    continue  # finished before the abort or preempt arrived
                self.kv_used -= seq.reserved
                if item.kind == WorkKind.ABORT:
                    self.worker.finish(seq.id, Status.CANCELLED, seq.generated)
                    self.stats.aborted += 1
                else:  # every token it generated was emitted at the end of its step
                    self.worker.preempted(seq.id, seq.generated)
                self.seqs.remove(seq)
                continue
            asked = output_tokens_param(item.params)
            target = item.max_output_tokens if asked == 0 else min(asked, item.max_output_tokens)
            done = len(item.resumed)  # a resumed sequence goes on from there
            if target <= done:  # nothing (more) to generate
                self.worker.finish(item.id, Status.OK, done)
                self.stats.finished += 1
                continue
            reserved = item.prompt_tokens + item.max_output_tokens
            self.kv_used += reserved
            # It recomputes prompt + what it generated before.
            self.seqs.append(Sequence(item.id, item.prompt, item.prompt_tokens + done, target,
                                      reserved, generated=done))
            took = True
        return took

    async def step(self, idle_wait: float) -> None:
        """One iteration; raises the worker's errors (DaemonLost when the daemon went away)."""
        self.state_capacity()
        if not self.seqs:
            await self.worker.wait(idle_wait)
        if self.take(self.worker.poll()):
            self.state_capacity()
        if not self.seqs:
            return
        budget = self.model.chunked_prefill_tokens
        prefilled = 0
        decoding = 0
        for s in self.seqs:
            if s.prefilled < s.prompt_tokens:
                n = min(budget, s.prompt_tokens - s.prefilled)
                s.prefilled += n
                budget -= n
                prefilled += n
                if s.prefilled < s.prompt_tokens:
                    continue
            decoding += 1
        cost_us = (
            self.model.step_us
            + self.model.prefill_token_us * prefilled
            + self.model.decode_token_us * decoding
        )
        # The modelled time: slept when it is long enough to sleep, else a
        # yield to the event loop.
        await asyncio.sleep(cost_us * 1e-6 if cost_us >= 50 else 0)
        self.stats.steps += 1
        # The step's tokens, one of each decoding sequence, in one record.
        step: list[tuple[int, int]] = []
        for s in self.seqs:
            if s.prefilled < s.prompt_tokens:
                continue
            step.append((s.id, reference_token(s.prompt, s.generated)))
            s.generated += 1
            self.stats.tokens += 1
        if step:
            self.worker.emit_step(step)
        still: list[Sequence] = []
        for s in self.seqs:
            if s.prefilled < s.prompt_tokens:
                still.append(s)
                continue
            if s.generated >= s.target:
                self.worker.finish(s.id, Status.OK, s.generated)
                self.kv_used -= s.reserved
                self.stats.finished += 1
                continue
            still.append(s)  # keeps arrival order
        self.seqs = still
        self.state_capacity()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.step(0.05)


async def serve(args: argparse.Namespace) -> int:
    model = EngineModel(
        args.max_sequences,
        args.kv_tokens,
        args.step_us,
        args.prefill_token_us,
        args.decode_token_us,
        args.chunked_prefill_tokens,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        worker = await AsyncWorker.connect(args.socket, args.endpoint, name=args.name)
    except fairsched.FairschedError as e:
        print(f"python_reference_engine: {e}", file=sys.stderr)
        return 1
    print(f"python_reference_engine: serving {args.endpoint}", file=sys.stderr, flush=True)
    engine = Engine(worker, model)
    try:
        await engine.run(stop)
    except fairsched.DaemonLost:
        print("python_reference_engine: the daemon went away", file=sys.stderr)
    finally:
        worker.close()
    s = engine.stats
    print(
        f"python_reference_engine: {s.steps} steps, {s.tokens} tokens, "
        f"{s.finished} finished, {s.aborted} aborted",
        file=sys.stderr,
    )
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--socket", default=fairsched.DEFAULT_SOCKET, help="fairschedd's socket")
    p.add_argument("--endpoint", required=True, help='the executor = "worker" endpoint to serve')
    p.add_argument("--name", default="python-ref", help="the worker's name in the daemon's status")
    d = EngineModel()
    p.add_argument("--max-sequences", type=int, default=d.max_sequences)
    p.add_argument("--kv-tokens", type=int, default=d.kv_tokens)
    p.add_argument("--step-us", type=float, default=d.step_us)
    p.add_argument("--prefill-token-us", type=float, default=d.prefill_token_us)
    p.add_argument("--decode-token-us", type=float, default=d.decode_token_us)
    p.add_argument("--chunked-prefill-tokens", type=int, default=d.chunked_prefill_tokens)
    return asyncio.run(serve(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
