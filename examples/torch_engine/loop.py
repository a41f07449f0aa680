"""The decode loops of examples/torch_worker.py around an Engine: serve(),
the fairsched worker loop (docs/worker.md), and run_standalone(), the same
loop fed straight from a list (the --bench baseline); LoopStats times both.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Optional

from fairsched import Status, Worker, WorkKind, prefix_block_hashes

from .engine import Engine


@dataclass
class LoopStats:
    steps: int = 0
    tokens: int = 0
    step_s: float = 0.0  # in Engine.step()
    iteration_s: float = 0.0  # whole busy iterations: fairsched calls + step
    fairsched_s: float = 0.0  # in set_capacity/poll/emit/finish of busy iterations
    first_s: float = 0.0
    last_s: float = 0.0
    prefill_tokens: int = 0  # prompt positions computed
    cached_tokens: int = 0  # prompt positions taken from the prefix cache

    def summary(self) -> dict[str, Any]:
        wall = max(self.last_s - self.first_s, 1e-9)
        n = max(self.steps, 1)
        return {
            "steps": self.steps,
            "tokens": self.tokens,
            "seconds": round(wall, 4),
            "tokens_per_s": round(self.tokens / wall, 1),
            "step_us": round(self.step_s / n * 1e6, 1),
            "iteration_us": round(self.iteration_s / n * 1e6, 1),
            "fairsched_us_per_step": round(self.fairsched_s / n * 1e6, 1),
            "prefill_tokens": self.prefill_tokens,
            "cached_tokens": self.cached_tokens,
        }


def serve(engine: Engine, worker: Worker, stopping: Callable[[], bool],
          stats: Optional[LoopStats] = None) -> None:
    """The worker loop until ``stopping()`` (or the daemon goes away: DaemonLost)."""
    st = stats if stats is not None else LoopStats()
    stated: Optional[tuple[int, int]] = None
    clock = time.perf_counter
    while not stopping():
        if not engine.busy():
            free = engine.capacity()
            if free != stated:
                worker.set_capacity(*free)
                stated = free
            worker.wait(0.1)  # idle: sleep until assignments come
        t0 = clock()
        items = worker.poll()
        for item in items:
            if item.kind == WorkKind.ABORT:
                seq = engine.drop(item.id)
                if seq is not None:  # not finished before the abort came
                    worker.finish(item.id, Status.CANCELLED, seq.generated)
                continue
            if item.kind == WorkKind.PREEMPT:
                continue  # this engine does not give sequences back: the daemon stops asking
            if item.resumed:  # preempted on another worker; this one cannot recompute it
                worker.finish(item.id, Status.EXECUTOR_FAILED, len(item.resumed),
                              "this worker cannot resume a preempted sequence")
                continue
            if item.max_output_tokens == 0:
                worker.finish(item.id, Status.OK, 0)
                continue
            why = engine.fits(item.prompt_tokens, item.max_output_tokens)
            seqs, kv = engine.capacity()
            if why is None and (seqs < 1 or kv < item.prompt_tokens + item.max_output_tokens):
                # The daemon assigns within the stated capacity; this is a bug, said so.
                worker.finish(item.id, Status.EXECUTOR_FAILED, 0,
                              f"assigned beyond the stated capacity ({seqs} sequences, {kv} KV tokens)")
                continue
            if why is not None:
                worker.finish(item.id, Status.INVALID, 0, why)
                continue
            chain = (prefix_block_hashes(item.prompt, engine.block_tokens)
                     if engine.cache_blocks > 0 and item.prompt else None)
            engine.add(item.id, item.prompt, item.prompt_tokens, item.max_output_tokens, chain)
        if not engine.busy():
            continue
        t1 = clock()
        res = engine.step()
        t2 = clock()
        for rid, tok in res.tokens:
            worker.emit(rid, (tok,))
        for seq in res.finished:
            worker.finish(seq.id, Status.OK, seq.generated)
        # KV events: what the prefix cache took in and let go this step.
        if res.stored:
            worker.blocks_stored(res.stored)
        if res.removed:
            worker.blocks_removed(res.removed)
        free = engine.capacity()
        if free != stated:
            worker.set_capacity(*free)
            stated = free
        t3 = clock()
        if st.steps == 0:
            st.first_s = t0
        st.steps += 1
        st.tokens += len(res.tokens)
        st.prefill_tokens += res.prefill_tokens
        st.cached_tokens += res.cached_tokens
        st.step_s += t2 - t1
        st.iteration_s += t3 - t0
        st.fairsched_s += (t1 - t0) + (t3 - t2)
        st.last_s = t3


def run_standalone(engine: Engine, requests: list[tuple[list[int], int]]) -> LoopStats:
    """The same loop without fairsched: requests join as capacity frees, in order."""
    st = LoopStats()
    queue = deque(enumerate(requests, start=1))
    clock = time.perf_counter
    st.first_s = clock()
    while queue or engine.busy():
        t0 = clock()
        while queue:
            rid, (prompt, n) = queue[0]
            seqs, kv = engine.capacity()
            if seqs < 1 or kv < len(prompt) + n:
                break
            queue.popleft()
            engine.add(rid, prompt, len(prompt), n)
        t1 = clock()
        res = engine.step()
        t2 = clock()
        st.steps += 1
        st.tokens += len(res.tokens)
        st.step_s += t2 - t1
        st.iteration_s += t2 - t0
        st.last_s = t2
    return st
