#!/usr/bin/env python3
"""A real decode loop behind fairsched: a small decoder-only transformer in
PyTorch serving a worker endpoint.

The model has random weights (seeded) and configurable layers, width, heads
and vocabulary. It models the compute and memory behaviour of a real
model's serving loop -- the matrix multiplies, the attention over a growing
KV cache, the batch shapes -- not its text: its tokens are the argmax of
random logits.

The engine keeps a KV cache per sequence (one slot of a preallocated pool
per layer, ``--max-context`` positions long) and batches continuously: each
step prefills the sequences assigned since the last one (their first token)
and then decodes one token of every running sequence in one batch. As a
fairsched worker (python/fairsched, docs/worker.md) it states its free
sequences and free KV tokens (set_capacity) so the daemon never assigns more
than the pool holds, streams every generated token as it is produced
(emit), acknowledges aborts (finish CANCELLED with the tokens produced) and
finishes every sequence with its usage.

    python3 examples/torch_worker.py --socket /run/fairsched/fairsched.sock --endpoint chat
    python3 examples/torch_worker.py --device cuda --layers 8 --width 1024 --heads 16 ...

``--bench`` measures the same decode loop both ways in one run: standalone
(requests fed straight into the engine) and through a fairschedd it starts
(``--fairschedd``), a client process submitting the same requests and
reading every token as a stream, alternating for ``--rounds`` rounds. It
prints one JSON object: for each way its best round's tokens/s and mean
loop iteration (and every round's), the time per step spent in fairsched
calls, and the difference of the iterations -- the daemon's added latency
per step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
# The package from this checkout (python/) or the kit, when not installed.
for _p in (HERE.parent / "python",):
    if (_p / "fairsched").is_dir() and str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import fairsched  # noqa: E402
from fairsched import Client, Status, Worker, WorkKind  # noqa: E402


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

    def prefill(self, x: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, slot: int) -> torch.Tensor:
        """x: [1, t, width], the whole prompt of the sequence in ``slot``."""
        q, k, v = self._split(self.ln1(x))
        t = x.shape[1]
        kc[slot, :, :t] = k[0]
        vc[slot, :, :t] = v[0]
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        s = s.masked_fill(causal, float("-inf"))
        return self._merge(x, torch.softmax(s.float(), dim=-1).to(v.dtype) @ v)

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

    def prefill(self, slot: int, prompt: list[int]) -> torch.Tensor:
        """Fills ``slot``'s cache with ``prompt``; the first output token (a 0-d tensor)."""
        dev = self.cfg.device
        ids = torch.tensor(prompt, device=dev, dtype=torch.long)
        x = self.embed(ids)[None] + self.position(torch.arange(len(prompt), device=dev))[None]
        for i, blk in enumerate(self.blocks):
            x = blk.prefill(x, self.k[i], self.v[i], slot)
        return self.head(self.ln_f(x[0, -1])).argmax()

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


@dataclass
class Sequence:
    id: int
    slot: int
    prompt: list[int]
    max_output_tokens: int
    kv_tokens: int  # reserved for it: what the daemon counts, prompt + max output
    generated: int = 0
    last: Optional[torch.Tensor] = None  # the last token, still on the device


@dataclass
class StepResult:
    tokens: list[tuple[int, int]] = field(default_factory=list)  # (sequence id, token)
    finished: list[Sequence] = field(default_factory=list)
    prefilled: int = 0
    decoded: int = 0


class Engine:
    """The continuous-batching engine: sequences join between steps and leave
    when done or aborted. Not thread-safe: one loop drives it."""

    def __init__(self, cfg: ModelConfig) -> None:
        self.cfg = cfg
        self.model = Model(cfg).eval()
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

    def add(self, rid: int, prompt: list[int], prompt_tokens: int, max_output_tokens: int) -> None:
        """REQUIRES: a free slot, room in the KV budget and fits() is None."""
        vocab = self.cfg.vocab
        if prompt:
            ids = [t % vocab for t in prompt]
        else:  # counts only (or an empty prompt): as many tokens, made up
            ids = [(rid + j) % vocab for j in range(max(prompt_tokens, 1))]
        seq = Sequence(rid, self.free_slots.pop(), ids, max_output_tokens,
                       prompt_tokens + max_output_tokens)
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
            firsts.append((seq, self.model.prefill(seq.slot, seq.prompt)))
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


@dataclass
class LoopStats:
    steps: int = 0
    tokens: int = 0
    step_s: float = 0.0  # in Engine.step()
    iteration_s: float = 0.0  # whole busy iterations: fairsched calls + step
    fairsched_s: float = 0.0  # in set_capacity/poll/emit/finish of busy iterations
    first_s: float = 0.0
    last_s: float = 0.0

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
            engine.add(item.id, item.prompt, item.prompt_tokens, item.max_output_tokens)
        if not engine.busy():
            continue
        t1 = clock()
        res = engine.step()
        t2 = clock()
        for rid, tok in res.tokens:
            worker.emit(rid, (tok,))
        for seq in res.finished:
            worker.finish(seq.id, Status.OK, seq.generated)
        free = engine.capacity()
        if free != stated:
            worker.set_capacity(*free)
            stated = free
        t3 = clock()
        if st.steps == 0:
            st.first_s = t0
        st.steps += 1
        st.tokens += len(res.tokens)
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


def bench_requests(n: int, prompt_len: int, output_len: int) -> list[tuple[list[int], int]]:
    return [([(i * 31 + j) % 50000 for j in range(prompt_len)], output_len) for i in range(n)]


def bench_client(args: argparse.Namespace) -> int:
    """--bench-client: submits the bench's requests as streams, reads every token."""
    reqs = bench_requests(args.requests, args.prompt_len, args.output_len)
    got: dict[int, int] = {}
    final: dict[int, Any] = {}
    with Client.connect(args.socket) as client:
        tenants = [client.open_tenant(f"t{i}") for i in range(2)]
        t0 = time.monotonic()
        ids: list[int] = []
        end = t0 + args.client_timeout
        while len(final) < len(reqs):
            if time.monotonic() > end:
                print(json.dumps({"error": f"{len(final)}/{len(reqs)} requests done "
                                           f"after {args.client_timeout} s"}))
                return 1
            while len(ids) < len(reqs):
                prompt, n = reqs[len(ids)]
                try:
                    rid = client.submit(tenants[len(ids) % 2], args.endpoint, prompt,
                                        max_output_tokens=n, stream=True)
                except fairsched.RingFull:
                    break  # read completions, then submit the rest
                ids.append(rid)
                got[rid] = 0
            client.wait(0.5 if len(ids) == len(reqs) else 0.01)
            for c in client.poll():
                if c.partial:
                    got[c.request_id] += len(c.tokens)
                else:
                    final[c.request_id] = c
        wall = time.monotonic() - t0
    bad = [rid for rid in ids
           if final[rid].status != Status.OK or final[rid].output_tokens != got[rid]
           or got[rid] != args.output_len]
    ttft = sorted(final[rid].time_to_first_token_ns / 1e6 for rid in ids)
    print(json.dumps({
        "requests": len(ids), "tokens": sum(got.values()), "seconds": round(wall, 4),
        "bad": len(bad), "ttft_ms_p50": round(ttft[len(ttft) // 2], 3),
    }))
    return 0 if not bad else 1


BENCH_CONFIG = """[daemon]
socket = "{socket}"
socket_mode = "0600"
log_level = "warn"
shutdown_grace_ms = 500
[[tiers]]
name = "paid"
[endpoints.{endpoint}]
executor = "worker"
max_batch_tokens = 1048576
max_output_tokens = {max_output}
batch_timeout_ms = 600000
[endpoints.{endpoint}.worker]
max_sequences = {max_sequences}
[[clients]]
name = "torch-bench"
uids = [{uid}]
tenants = ["*"]
endpoints = ["*"]
workers = ["{endpoint}"]
"""


def best(runs: list[LoopStats]) -> dict[str, Any]:
    """The round with the shortest mean iteration, with every round's figures."""
    sums = [r.summary() for r in runs]
    out = dict(min(sums, key=lambda x: x["iteration_us"]))
    out["rounds"] = [{k: x[k] for k in ("tokens_per_s", "iteration_us", "fairsched_us_per_step")}
                     for x in sums]
    return out


def bench(args: argparse.Namespace, cfg: ModelConfig) -> int:
    """--bench: the loop standalone, then through fairschedd, same requests,
    alternating for --rounds rounds; each mode's best round is reported."""
    engine = Engine(cfg)
    reqs = bench_requests(args.requests, args.prompt_len, args.output_len)
    why = engine.fits(args.prompt_len, args.output_len)
    if why is not None:
        print(f"torch_worker: --bench: {why}", file=sys.stderr)
        return 2
    run_standalone(engine, reqs[: min(4, len(reqs))])  # warm-up (allocator, kernels)

    tmp = Path(tempfile.mkdtemp(prefix="fstw-", dir="/tmp"))
    sock = str(tmp / "fairsched.sock")
    conf = tmp / "fairsched.toml"
    conf.write_text(BENCH_CONFIG.format(socket=sock, endpoint=args.endpoint, uid=os.getuid(),
                                        max_output=max(args.output_len, 1),
                                        max_sequences=cfg.max_sequences))
    log = open(tmp / "fairschedd.log", "wb")
    daemon = subprocess.Popen([args.fairschedd, "--config", str(conf)], stdout=log,
                              stderr=subprocess.STDOUT)
    client: Optional[subprocess.Popen[str]] = None
    alone: list[LoopStats] = []
    via: list[LoopStats] = []
    clients: list[dict[str, Any]] = []
    ok = True
    try:
        end = time.monotonic() + 15
        while True:
            if daemon.poll() is not None:
                raise RuntimeError(f"fairschedd exited: {(tmp / 'fairschedd.log').read_text()}")
            try:
                Client.connect(sock, connect_timeout=1.0).close()
                break
            except fairsched.FairschedError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)
        with Worker.connect(sock, args.endpoint, name="torch-bench") as worker:
            for _ in range(max(args.rounds, 1)):
                alone.append(run_standalone(engine, reqs))
                st = LoopStats()
                c = subprocess.Popen(
                    [sys.executable, str(Path(__file__).resolve()), "--bench-client",
                     "--socket", sock, "--endpoint", args.endpoint,
                     "--requests", str(args.requests), "--prompt-len", str(args.prompt_len),
                     "--output-len", str(args.output_len),
                     "--client-timeout", str(args.client_timeout)],
                    stdout=subprocess.PIPE, text=True)
                client = c
                serve(engine, worker, lambda: c.poll() is not None and not engine.busy(), st)
                out, _ = c.communicate(timeout=30)
                res = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
                clients.append(res)
                via.append(st)
                ok = ok and c.returncode == 0 and res.get("bad") == 0
                ok = ok and st.tokens == alone[-1].tokens == args.requests * args.output_len
    finally:
        if client is not None and client.poll() is None:
            client.kill()
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(10)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()
    a, d = best(alone), best(via)
    result = {
        "model": {"layers": cfg.layers, "width": cfg.width, "heads": cfg.heads,
                  "vocab": cfg.vocab, "max_context": cfg.max_context,
                  "max_sequences": cfg.max_sequences, "dtype": cfg.dtype,
                  "device": cfg.device, "kv_cache_bytes": engine.model.kv_bytes()},
        "torch": torch.__version__,
        "requests": args.requests, "prompt_len": args.prompt_len, "output_len": args.output_len,
        "standalone": a,
        "through_fairsched": d,
        "client": clients[-1] if clients else {},
        # What the daemon adds to each busy iteration of the loop: measured
        # directly (fairsched_us_per_step) and as the difference of the best rounds.
        "added_us_per_step": round(d["iteration_us"] - a["iteration_us"], 1),
        "tokens_per_s_ratio": round(d["tokens_per_s"] / max(a["tokens_per_s"], 1e-9), 3),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0 if ok else 1


def model_config(args: argparse.Namespace) -> ModelConfig:
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    return ModelConfig(args.layers, args.width, args.heads, args.vocab, args.max_context,
                       args.max_sequences, args.kv_tokens or args.max_sequences * args.max_context,
                       args.device, dtype, args.seed)


def main() -> int:
    p = argparse.ArgumentParser(description="A PyTorch decoder (random weights) as a fairsched worker")
    p.add_argument("--socket", default=fairsched.DEFAULT_SOCKET)
    p.add_argument("--endpoint", default="chat")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--dtype", default="", help="float32, bfloat16, float16 (default: bf16 on cuda)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--max-context", type=int, default=512, help="KV positions per sequence")
    p.add_argument("--max-sequences", type=int, default=8, help="KV slots")
    p.add_argument("--kv-tokens", type=int, default=0,
                   help="KV tokens offered in all (default: slots * context)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bench", action="store_true", help="standalone vs through fairschedd")
    p.add_argument("--fairschedd", default="fairschedd", help="--bench: the daemon binary")
    p.add_argument("--requests", type=int, default=64, help="--bench: requests")
    p.add_argument("--prompt-len", type=int, default=64, help="--bench: prompt tokens each")
    p.add_argument("--output-len", type=int, default=128, help="--bench: output tokens each")
    p.add_argument("--rounds", type=int, default=1, help="--bench: alone/through rounds")
    p.add_argument("--client-timeout", type=float, default=240.0, help=argparse.SUPPRESS)
    p.add_argument("--json", default="", help="--bench: also write the result here")
    p.add_argument("--bench-client", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.bench_client:
        return bench_client(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("torch_worker: --device cuda: torch sees no CUDA device", file=sys.stderr)
        return 2
    cfg = model_config(args)
    if args.bench:
        return bench(args, cfg)

    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    engine = Engine(cfg)
    print(f"torch_worker: {cfg.layers} layers, width {cfg.width}, {cfg.heads} heads, vocab "
          f"{cfg.vocab}, {cfg.max_sequences} x {cfg.max_context} KV positions "
          f"({engine.model.kv_bytes() / 2**20:.1f} MiB) on {cfg.device}, {cfg.dtype}", flush=True)
    with Worker.connect(args.socket, args.endpoint, name="torch-worker") as worker:
        try:
            serve(engine, worker, lambda: bool(stopping))
        except fairsched.DaemonLost:
            print("torch_worker: the daemon went away", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
