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

The parts live in torch_engine/ next to this file: model.py (the
transformer and its KV pool), engine.py (continuous batching), loop.py (the
worker loop and the standalone one) and bench.py (--bench).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The package from this checkout (python/) or the kit, when not installed.
for _p in (HERE.parent / "python",):
    if (_p / "fairsched").is_dir() and str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import torch  # noqa: E402

import fairsched  # noqa: E402
from fairsched import Worker  # noqa: E402
from torch_engine.bench import bench, bench_client  # noqa: E402
from torch_engine.bench_routing import bench_routing  # noqa: E402
from torch_engine.engine import Engine  # noqa: E402
from torch_engine.loop import LoopStats, serve  # noqa: E402
from torch_engine.model import ModelConfig  # noqa: E402


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
    p.add_argument("--prefix-cache-blocks", type=int, default=0,
                   help="keep the keys and values of this many prompt blocks (0: no prefix cache)")
    p.add_argument("--block-tokens", type=int, default=16,
                   help="tokens per prefix block (the endpoint's prefix_block_tokens)")
    p.add_argument("--stats-json", default="", help="write the loop's counters here on exit")
    p.add_argument("--bench", action="store_true", help="standalone vs through fairschedd")
    p.add_argument("--fairschedd", default="fairschedd", help="--bench: the daemon binary")
    p.add_argument("--requests", type=int, default=64, help="--bench: requests")
    p.add_argument("--prompt-len", type=int, default=64, help="--bench: prompt tokens each")
    p.add_argument("--output-len", type=int, default=128, help="--bench: output tokens each")
    p.add_argument("--rounds", type=int, default=1, help="--bench: alone/through rounds")
    p.add_argument("--client-timeout", type=float, default=240.0, help=argparse.SUPPRESS)
    p.add_argument("--json", default="", help="--bench: also write the result here")
    p.add_argument("--bench-client", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--bench-routing", action="store_true",
                   help="two workers, routing roomiest vs prefix, a prefix-heavy workload")
    p.add_argument("--families", type=int, default=8, help="--bench-routing: prompt families")
    p.add_argument("--per-family", type=int, default=6, help="--bench-routing: requests each")
    p.add_argument("--prefix-len", type=int, default=384,
                   help="--bench-routing: tokens a family's prompts share")
    p.add_argument("--fairness", default="drr", help="--bench-routing: the endpoint's fairness")
    p.add_argument("--locality-slack", type=float, default=0.0,
                   help="--bench-routing: the endpoint's locality_slack (recent, vtc)")
    args = p.parse_args()
    if args.bench_client:
        return bench_client(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("torch_worker: --device cuda: torch sees no CUDA device", file=sys.stderr)
        return 2
    cfg = model_config(args)
    if args.bench_routing:
        # The workers' model: this one's flags, passed on.
        model_args = ["--device", args.device, "--layers", str(args.layers),
                      "--width", str(args.width), "--heads", str(args.heads),
                      "--vocab", str(args.vocab), "--max-context", str(args.max_context),
                      "--max-sequences", str(args.max_sequences), "--threads",
                      str(args.threads or 1), "--block-tokens", str(args.block_tokens)]
        if args.dtype:
            model_args += ["--dtype", args.dtype]
        return bench_routing(args, Path(__file__).resolve(), model_args)
    if args.bench:
        return bench(args, cfg, Path(__file__).resolve())

    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    engine = Engine(cfg, args.prefix_cache_blocks, args.block_tokens)
    print(f"torch_worker: {cfg.layers} layers, width {cfg.width}, {cfg.heads} heads, vocab "
          f"{cfg.vocab}, {cfg.max_sequences} x {cfg.max_context} KV positions "
          f"({engine.model.kv_bytes() / 2**20:.1f} MiB) on {cfg.device}, {cfg.dtype}", flush=True)
    stats = LoopStats()
    with Worker.connect(args.socket, args.endpoint, name="torch-worker") as worker:
        try:
            serve(engine, worker, lambda: bool(stopping), stats)
        except fairsched.DaemonLost:
            print("torch_worker: the daemon went away", flush=True)
    if args.stats_json:
        Path(args.stats_json).write_text(json.dumps(stats.summary()) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
