"""--bench of examples/torch_worker.py: the decode loop standalone and
through a fairschedd it starts, with a client process (--bench-client)
submitting the same requests and reading every token as a stream.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import torch

import fairsched
from fairsched import Client, Status, Worker

from .engine import Engine
from .loop import LoopStats, run_standalone, serve
from .model import ModelConfig


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
state_dir = ""
shutdown_grace_ms = 500
[[tiers]]
name = "paid"
[endpoints.{endpoint}]
executor = "worker"
max_batch_tokens = 1048576
max_output_tokens = {max_output}
batch_timeout_ms = 600000
{endpoint_extra}[endpoints.{endpoint}.worker]
{worker_extra}[[clients]]
name = "torch-bench"
uids = [{uid}]
tenants = ["*"]
endpoints = ["*"]
workers = ["{endpoint}"]
admin = true
"""


def start_daemon(fairschedd: str, endpoint: str, max_output: int, endpoint_extra: str = "",
                 worker_extra: str = "") -> tuple[subprocess.Popen[bytes], Path, str, Any]:
    """A fairschedd for a bench on a socket in a fresh directory, serving
    ``endpoint`` (executor = "worker") with the extra TOML lines given, once
    it answers: (process, directory, socket, its log file)."""
    tmp = Path(tempfile.mkdtemp(prefix="fstw-", dir="/tmp"))
    sock = str(tmp / "fairsched.sock")
    conf = tmp / "fairsched.toml"
    conf.write_text(BENCH_CONFIG.format(socket=sock, endpoint=endpoint, uid=os.getuid(),
                                        max_output=max(max_output, 1),
                                        endpoint_extra=endpoint_extra, worker_extra=worker_extra))
    log = open(tmp / "fairschedd.log", "wb")
    daemon = subprocess.Popen([fairschedd, "--config", str(conf)], stdout=log,
                              stderr=subprocess.STDOUT)
    end = time.monotonic() + 15
    while True:
        if daemon.poll() is not None:
            raise RuntimeError(f"fairschedd exited: {(tmp / 'fairschedd.log').read_text()}")
        try:
            Client.connect(sock, connect_timeout=1.0).close()
            return daemon, tmp, sock, log
        except fairsched.FairschedError:
            if time.monotonic() > end:
                daemon.kill()
                raise
            time.sleep(0.05)


def stop_daemon(daemon: subprocess.Popen[bytes], log: Any) -> None:
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(10)
    except subprocess.TimeoutExpired:
        daemon.kill()
    log.close()


def best(runs: list[LoopStats]) -> dict[str, Any]:
    """The round with the shortest mean iteration, with every round's figures."""
    sums = [r.summary() for r in runs]
    out = dict(min(sums, key=lambda x: x["iteration_us"]))
    out["rounds"] = [{k: x[k] for k in ("tokens_per_s", "iteration_us", "fairsched_us_per_step")}
                     for x in sums]
    return out


def bench(args: argparse.Namespace, cfg: ModelConfig, script: Path) -> int:
    """--bench: the loop standalone, then through fairschedd, same requests,
    alternating for --rounds rounds; each mode's best round is reported.
    ``script``: torch_worker.py, run again as the client (--bench-client)."""
    engine = Engine(cfg)
    reqs = bench_requests(args.requests, args.prompt_len, args.output_len)
    why = engine.fits(args.prompt_len, args.output_len)
    if why is not None:
        print(f"torch_worker: --bench: {why}", file=sys.stderr)
        return 2
    run_standalone(engine, reqs[: min(4, len(reqs))])  # warm-up (allocator, kernels)

    daemon, _, sock, log = start_daemon(args.fairschedd, args.endpoint, args.output_len,
                                        worker_extra=f"max_sequences = {cfg.max_sequences}\n")
    client: Optional[subprocess.Popen[str]] = None
    alone: list[LoopStats] = []
    via: list[LoopStats] = []
    clients: list[dict[str, Any]] = []
    ok = True
    try:
        with Worker.connect(sock, args.endpoint, name="torch-bench") as worker:
            for _ in range(max(args.rounds, 1)):
                alone.append(run_standalone(engine, reqs))
                st = LoopStats()
                c = subprocess.Popen(
                    [sys.executable, str(script), "--bench-client",
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
        stop_daemon(daemon, log)
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
