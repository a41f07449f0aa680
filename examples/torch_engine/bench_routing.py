"""--bench-routing of examples/torch_worker.py: two torch workers behind one
fairschedd, a prefix-heavy workload, served with routing = "roomiest" and
with routing = "prefix" in turn (alternating for --rounds rounds), the
workers keeping a prefix cache each (--prefix-cache-blocks, by default half
of the workload's distinct shared blocks) and reporting it as KV events.

The workload: --families prompt families, each a shared prefix of
--prefix-len tokens and a suffix of --prompt-len tokens of its own,
--per-family requests each, submitted at once in a seeded random order,
family f by tenant f % 2, each generating --output-len tokens. Reported per
routing: output tokens per second (first submission to last completion),
prompt positions the workers computed and took from their caches, and the
daemon's hit blocks; the ratio of tokens/s is the aim's (prefix / roomiest,
same run).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from fairsched import Client, Status

from .bench import start_daemon, stop_daemon

AIM = 1.3  # tokens/s, prefix over roomiest


def workload(args: argparse.Namespace) -> list[tuple[int, list[int]]]:
    """(tenant, prompt) in submission order: every family's requests in a
    seeded random order (traffic mixes them; a regular order would let
    placement by room line families up with workers by accident). Family f
    belongs to tenant f % 2: a tenant's prompts share its own prefixes."""
    out = []
    for r in range(args.per_family):
        for f in range(args.families):
            shared = [(f * 7919 + j * 31) % 50000 for j in range(args.prefix_len)]
            own = [(f * 131 + r * 17 + j) % 50000 + 50000 for j in range(args.prompt_len)]
            out.append((f % 2, shared + own))
    random.Random(args.seed).shuffle(out)
    return out


def _wait_for(pred: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise RuntimeError(f"--bench-routing: no {what} within {timeout} s")
        time.sleep(0.05)


def one_run(args: argparse.Namespace, script: Path, routing: str, model_args: list[str],
            cache_blocks: int) -> dict[str, Any]:
    daemon, tmp, sock, log = start_daemon(
        args.fairschedd, args.endpoint, args.output_len,
        endpoint_extra=f'fairness = "{args.fairness}"\n',
        worker_extra=f'routing = "{routing}"\nlocality_slack = {float(args.locality_slack)}\n')
    workers: list[subprocess.Popen[bytes]] = []
    try:
        for w in range(2):
            workers.append(subprocess.Popen(
                [sys.executable, str(script), "--socket", sock, "--endpoint", args.endpoint,
                 *model_args, "--prefix-cache-blocks", str(cache_blocks),
                 "--stats-json", str(tmp / f"worker{w}.json")],
                stdout=open(tmp / f"worker{w}.log", "wb"), stderr=subprocess.STDOUT))
        prompts = workload(args)
        with Client.connect(sock) as client:
            def attached() -> bool:
                if any(p.poll() is not None for p in workers):
                    raise RuntimeError("a torch worker exited: " +
                                       (tmp / "worker0.log").read_text()[-2000:])
                st = json.loads(subprocess.run(
                    [str(Path(args.fairschedd).with_name("fairschedctl")), "--socket", sock,
                     "status", "--json"], capture_output=True, text=True).stdout or "{}")
                return len(st.get("workers", [])) == 2 and all(
                    w.get("stated_free_sequences", 0) > 0 for w in st["workers"])
            _wait_for(attached, 120, "two attached torch workers")
            tenants = [client.open_tenant(f"t{i}") for i in range(2)]
            final: dict[int, Any] = {}
            t0 = time.monotonic()
            ids = [client.submit(tenants[t], args.endpoint, p, max_output_tokens=args.output_len)
                   for t, p in prompts]
            end = t0 + args.client_timeout
            while len(final) < len(ids):
                if time.monotonic() > end:
                    raise RuntimeError(f"{len(final)}/{len(ids)} requests done after "
                                       f"{args.client_timeout} s")
                client.wait(0.5)
                for c in client.poll():
                    final[c.request_id] = c
            wall = time.monotonic() - t0
            st = json.loads(subprocess.run(
                [str(Path(args.fairschedd).with_name("fairschedctl")), "--socket", sock,
                 "status", "--json"], capture_output=True, text=True).stdout)
        bad = sum(1 for c in final.values()
                  if c.status != Status.OK or c.output_tokens != args.output_len)
        for p in workers:
            p.send_signal(signal.SIGTERM)
        for p in workers:
            p.wait(30)
        stats = [json.loads((tmp / f"worker{w}.json").read_text()) for w in range(2)]
        tokens = sum(c.output_tokens for c in final.values())
        return {
            "seconds": round(wall, 4),
            "tokens_per_s": round(tokens / wall, 1),
            "requests": len(ids),
            "bad": bad,
            "prefill_tokens": sum(s["prefill_tokens"] for s in stats),
            "cached_tokens": sum(s["cached_tokens"] for s in stats),
            "hit_blocks": sum(w["prefix_cache"]["hit_blocks"] for w in st["workers"]),
            "requests_per_worker": [w["assigned"] for w in st["workers"]],
        }
    finally:
        for p in workers:
            if p.poll() is None:
                p.kill()
        stop_daemon(daemon, log)


def bench_routing(args: argparse.Namespace, script: Path, model_args: list[str]) -> int:
    blocks = args.prefix_len // args.block_tokens
    cache = args.prefix_cache_blocks or max(1, args.families * blocks // 2)
    runs: dict[str, list[dict[str, Any]]] = {"roomiest": [], "prefix": []}
    for _ in range(max(args.rounds, 1)):
        for routing in ("roomiest", "prefix"):
            runs[routing].append(one_run(args, script, routing, model_args, cache))
    best = {k: max(v, key=lambda r: r["tokens_per_s"]) for k, v in runs.items()}
    ratio = best["prefix"]["tokens_per_s"] / max(best["roomiest"]["tokens_per_s"], 1e-9)
    result = {
        "fairness": args.fairness, "locality_slack": args.locality_slack,
        "workload": {"families": args.families, "per_family": args.per_family,
                     "prefix_len": args.prefix_len, "prompt_len": args.prompt_len,
                     "output_len": args.output_len, "block_tokens": args.block_tokens,
                     "distinct_shared_blocks": args.families * blocks,
                     "cache_blocks_per_worker": cache, "workers": 2},
        "roomiest": best["roomiest"],
        "prefix": best["prefix"],
        "rounds": runs,
        # Each round's pair (run back to back), prefix / roomiest.
        "ratio_per_round": [round(p["tokens_per_s"] / max(r["tokens_per_s"], 1e-9), 3)
                            for r, p in zip(runs["roomiest"], runs["prefix"])],
        "aims": [{"aim": "tokens/s, routing prefix / roomiest (same run)",
                  "value": round(ratio, 3), "at_least": AIM, "met": ratio >= AIM}],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    ok = all(r["bad"] == 0 for v in runs.values() for r in v)
    return 0 if ok else 1
