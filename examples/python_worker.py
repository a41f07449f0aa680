#!/usr/bin/env python3
"""The smallest engine loop in the worker role, blocking: the shape of a vLLM or
SGLang step loop around fairsched.Worker. Each step decodes one token of
every running sequence (the reference tokens: (p[j % len(p)] + j + 1) mod
2**32); new sequences join between steps; aborts are acknowledged.

    python3 examples/python_worker.py --socket /run/fairsched/fairsched.sock --endpoint chat
"""

from __future__ import annotations

import argparse
import signal
import time
from dataclasses import dataclass

import fairsched
from fairsched import Status, Worker, WorkKind

MAX_SEQUENCES = 16
KV_TOKENS = 65536


@dataclass
class Sequence:
    prompt: list[int]
    max_output_tokens: int
    kv_tokens: int  # reserved for it: prompt + max output
    generated: int = 0


def main() -> int:
    p = argparse.ArgumentParser(description="A minimal blocking engine loop over fairsched")
    p.add_argument("--socket", default=fairsched.DEFAULT_SOCKET)
    p.add_argument("--endpoint", default="chat")
    p.add_argument("--step-ms", type=float, default=1.0, help="the modelled time of one step")
    args = p.parse_args()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))

    running: dict[int, Sequence] = {}
    stated = None
    with Worker.connect(args.socket, args.endpoint, name="python-worker") as worker:
        try:
            while not stopping:
                # What the engine can take now; stated again only when it changed.
                free = (MAX_SEQUENCES - len(running),
                        KV_TOKENS - sum(s.kv_tokens for s in running.values()))
                if free != stated:
                    worker.set_capacity(*free)
                    stated = free
                if not running:
                    worker.wait(0.1)  # idle: sleep until assignments come
                for item in worker.poll():
                    if item.kind == WorkKind.ABORT:
                        seq = running.pop(item.id, None)
                        if seq is not None:  # not finished before the abort came
                            worker.finish(item.id, Status.CANCELLED, seq.generated)
                        continue
                    if item.kind == WorkKind.PREEMPT:  # give it back: all emitted already
                        seq = running.pop(item.id, None)
                        if seq is not None:
                            worker.preempted(item.id, seq.generated)
                        continue
                    if item.max_output_tokens == 0:  # nothing to generate
                        worker.finish(item.id, Status.OK, 0)
                        continue
                    running[item.id] = Sequence(item.prompt, item.max_output_tokens,
                                                item.prompt_tokens + item.max_output_tokens)
                    running[item.id].generated = len(item.resumed)  # resumed: go on from there
                # One decode step over the batch (a real engine runs its model here).
                if running:
                    time.sleep(args.step_ms / 1000)
                for rid, seq in list(running.items()):
                    base = seq.prompt[seq.generated % len(seq.prompt)] if seq.prompt else 0
                    worker.emit(rid, [(base + seq.generated + 1) % 2**32])
                    seq.generated += 1
                    if seq.generated == seq.max_output_tokens:
                        worker.finish(rid, Status.OK, seq.generated)
                        del running[rid]
        except fairsched.DaemonLost:
            print("python_worker: the daemon went away")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
