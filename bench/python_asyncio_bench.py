#!/usr/bin/env python3
"""Submissions and streamed tokens per second through the Python asyncio
client against the C++ client, one thread each, in the same run.

A daemon and the C++ reference worker with a zero-cost engine (64
sequences) serve a worker endpoint; for each workload the C++ client
(build/bin/fairsched-client-throughput) and then the Python AsyncClient
(one event loop, a task per request in flight) keep --inflight requests
in flight for --seconds, --rounds times (alternating), and the best round
of each is compared, with the medians beside. Every streamed token is checked against the reference formula;
lost, mismatched or failed requests fail the run.

    PYTHONPATH=python python3 bench/python_asyncio_bench.py [--build build] [--json out.json]

Run from the checkout after building fairschedd, fairsched-worker and
fairsched-client-throughput. Both clients share the machine with the daemon
and the worker: on a small machine the figures are those of the whole
pipeline, not of the client alone (the C++ one especially).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import operator
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import REPO, arguments, write_json

sys.path.insert(0, str(REPO / "python"))

import fairsched  # noqa: E402
from fairsched import AsyncClient, RingFull, Status  # noqa: E402

U32 = 0xFFFFFFFF
WORKLOADS = [
    # name, output tokens per request, stream
    ("submissions (1 output token, final only)", 1, False),
    ("streamed tokens (256 per request)", 256, True),
]


def config(socket: str) -> str:
    return (
        f'[daemon]\nsocket = "{socket}"\nsocket_mode = "0600"\nlog_level = "error"\nstate_dir = ""\n'
        '[[tiers]]\nname = "bench"\n'
        '[endpoints.chat]\nexecutor = "worker"\nmax_batch_tokens = 65536\n'
        "max_output_tokens = 8192\nbatch_timeout_ms = 0\n"
        "[endpoints.chat.worker]\nmax_sequences = 256\nclient_buffer_chunks = 65536\n"
        "[endpoints.chat.engine]\nmax_sequences = 64\nstep_us = 0.0\n"
        "prefill_token_us = 0.0\ndecode_token_us = 0.0\n"
        '[tenants.bench]\ntier = "bench"\nqueue_limit = 100000\n'
        f'[[clients]]\nname = "bench"\nuids = [{os.getuid()}]\ntenants = ["*"]\n'
        'endpoints = ["*"]\nworkers = ["chat"]\n'
    )


def expected(prompt: list[int], n: int) -> list[int]:
    """The reference worker's output for ``prompt``: token j is
    (prompt[j % len(prompt)] + j + 1) mod 2**32."""
    if not prompt:
        return [(j + 1) & U32 for j in range(n)]
    if max(prompt) + n <= U32:  # no wrap-around: one C loop (map)
        return list(map(operator.add, itertools.islice(itertools.cycle(prompt), n),
                        range(1, n + 1)))
    return [(prompt[j % len(prompt)] + j + 1) & U32 for j in range(n)]


async def python_client(socket: str, seconds: float, inflight: int, output_tokens: int,
                        prompt_tokens: int, stream: bool) -> dict[str, Any]:
    client = await AsyncClient.connect(socket, name="py-throughput")
    tenant = await client.open_tenant("bench")
    loop = asyncio.get_running_loop()
    c = dict(submitted=0, completed=0, tokens=0, mismatched=0, lost=0, failed=0, ring_full=0,
             window_completed=0, window_tokens=0)
    counter = [0]
    end = loop.time() + seconds

    async def lane() -> None:
        while loop.time() < end:
            i = counter[0]
            counter[0] += 1
            prompt = [(i * 7 + k) & U32 for k in range(prompt_tokens)]
            try:
                req = client.submit(tenant, "chat", prompt, max_output_tokens=output_tokens,
                                    stream=stream)
            except RingFull:
                c["ring_full"] += 1
                await asyncio.sleep(0)
                continue
            c["submitted"] += 1
            received = 0
            if stream:
                want = expected(prompt, output_tokens)
                async for chunk in req:
                    tokens = chunk.tokens
                    n = len(tokens)
                    first = chunk.first_token
                    # Every token checked: one comparison per chunk (C), and
                    # a count of the wrong ones only when there are some.
                    if first != received or tokens != want[first:first + n]:
                        c["mismatched"] += max(1, sum(
                            1 for a, b in zip(tokens, want[received:received + n]) if a != b))
                    received += n
                    c["tokens"] += n
                    if loop.time() < end:
                        c["window_tokens"] += n
            final = await req
            c["completed"] += 1
            in_window = loop.time() < end
            if in_window:
                c["window_completed"] += 1
            if not stream:
                c["tokens"] += final.output_tokens
                if in_window:
                    c["window_tokens"] += final.output_tokens
            if final.status != Status.OK:
                c["failed"] += 1
            elif stream and received < final.output_tokens:
                c["lost"] += final.output_tokens - received

    await asyncio.wait_for(asyncio.gather(*(lane() for _ in range(inflight))), seconds + 30)
    client.close()
    out: dict[str, Any] = {k: v for k, v in c.items() if not k.startswith("window_")}
    out.update(client="python-asyncio", submissions_per_s=c["window_completed"] / seconds,
               tokens_per_s=c["window_tokens"] / seconds)
    return out


def cpp_client(binary: Path, socket: str, seconds: float, inflight: int, output_tokens: int,
               prompt_tokens: int, stream: bool) -> dict[str, Any]:
    argv = [str(binary), "--socket", socket, "--seconds", str(seconds), "--inflight",
            str(inflight), "--output-tokens", str(output_tokens), "--prompt-tokens",
            str(prompt_tokens)] + (["--stream"] if stream else [])
    r = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    if not r.stdout.strip():
        raise SystemExit(f"{binary.name} failed: {r.stderr}")
    return dict(json.loads(r.stdout))


def main() -> int:
    p = arguments(__doc__)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--inflight", type=int, default=64)
    p.add_argument("--prompt-tokens", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    bindir = Path(args.build) / "bin"
    for b in ("fairschedd", "fairsched-worker", "fairsched-client-throughput"):
        if not (bindir / b).exists():
            raise SystemExit(f"{bindir / b} is not built")

    work = Path(tempfile.mkdtemp(prefix="fsb-", dir="/tmp"))
    socket = str(work / "fairsched.sock")
    (work / "bench.toml").write_text(config(socket))
    log = open(work / "processes.log", "wb")
    daemon = subprocess.Popen([str(bindir / "fairschedd"), "--config", str(work / "bench.toml")],
                              stdout=log, stderr=subprocess.STDOUT)
    worker = None
    results = []
    failed = False
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                fairsched.Client.connect(socket, connect_timeout=1.0).close()
                break
            except fairsched.FairschedError:
                if time.monotonic() > deadline or daemon.poll() is not None:
                    raise SystemExit("fairschedd did not start: see " + str(work))
                time.sleep(0.02)
        worker = subprocess.Popen([str(bindir / "fairsched-worker"), "--socket", socket,
                                   "--endpoint", "chat", "--config", str(work / "bench.toml")],
                                  stdout=log, stderr=subprocess.STDOUT)
        for name, output_tokens, stream in WORKLOADS:
            runs: dict[str, list[dict[str, Any]]] = {"c++": [], "python-asyncio": []}
            for _ in range(args.rounds):
                runs["c++"].append(cpp_client(bindir / "fairsched-client-throughput", socket,
                                              args.seconds, args.inflight, output_tokens,
                                              args.prompt_tokens, stream))
                runs["python-asyncio"].append(asyncio.run(python_client(
                    socket, args.seconds, args.inflight, output_tokens, args.prompt_tokens,
                    stream)))
            key = "tokens_per_s" if stream else "submissions_per_s"
            best = {k: max(v, key=lambda r: float(r[key])) for k, v in runs.items()}
            median = {k: statistics.median(float(r[key]) for r in v) for k, v in runs.items()}
            for r in runs["c++"] + runs["python-asyncio"]:
                if r["mismatched"] or r["lost"] or r["failed"]:
                    failed = True
            results.append({"workload": name, "metric": key, "cpp": best["c++"],
                            "python": best["python-asyncio"],
                            "ratio": best["python-asyncio"][key] / max(best["c++"][key], 1e-9),
                            "median": {"cpp": median["c++"], "python": median["python-asyncio"]},
                            "rounds": runs})
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            worker.wait(10)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(10)
        log.close()

    print(f"python asyncio vs C++ client, one thread each: {args.inflight} in flight, "
          f"{args.seconds:g} s x {args.rounds} rounds (best), zero-cost reference worker")
    print(f"{'workload':42} {'C++ /s (median)':>22} {'Python /s (median)':>22} {'ratio':>6}")
    for r in results:
        m = r["metric"]
        cpp = f"{r['cpp'][m]:,.0f} ({r['median']['cpp']:,.0f})"
        py = f"{r['python'][m]:,.0f} ({r['median']['python']:,.0f})"
        print(f"{r['workload']:42} {cpp:>22} {py:>22} {r['ratio']:6.2f}")
    machine = f"{platform.node()}: {os.cpu_count()} CPUs, {platform.platform()}"
    print(machine)
    if args.json:
        doc = {"scenario": "python-asyncio", "command": " ".join(sys.argv), "machine": machine,
               "results": [{k: v for k, v in r.items() if k != "rounds"} for r in results]}
        write_json(args.json, doc)
    shutil.rmtree(work, ignore_errors=True)
    if failed:
        print("FAILED: lost, mismatched or failed requests (see the JSON)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
