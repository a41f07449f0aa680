#!/usr/bin/env python3
"""fairsched-gateway against calling the upstream directly, in the same run.

Starts fairschedd, the fake OpenAI upstream (tests/gateway/fake_upstream.py,
no per-token delay, so what is measured is the path, not an engine) and the
gateway; then, with the same client (threads, one keep-alive connection
each), sends the same requests to the upstream directly and through the
gateway. Prints requests/s and latency percentiles of both, the latency the
gateway adds, the gateway's own time by its x-fairsched-overhead-ms header,
and the upstream connections the gateway opened (--pool-connections 0: one
per request, as before the pool).

  bench/gateway_bench.py [--build build] [--requests 2000] [--concurrency 8]
                         [--max-tokens 8] [--stream] [--pool-connections N]
                         [--json OUT]
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchlib import REPO, arguments, write_json

sys.path.insert(0, str(REPO / "tests" / "gateway"))


def run(port: int, key: str | None, n: int, conc: int, body: dict) -> dict:
    lat: list[float] = []
    own: list[float] = []  # x-fairsched-overhead-ms, where the answer has it
    lock = threading.Lock()
    per = n // conc
    errors = [0]
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"

    def worker() -> None:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine = []
        mine_own = []
        for _ in range(per):
            t0 = time.perf_counter()
            c.request("POST", "/v1/completions", body=data, headers=headers)
            r = c.getresponse()
            r.read()
            mine.append(time.perf_counter() - t0)
            if r.getheader("x-fairsched-overhead-ms"):
                mine_own.append(float(r.getheader("x-fairsched-overhead-ms")))
            if r.status != 200:
                errors[0] += 1
        c.close()
        with lock:
            lat.extend(mine)
            own.extend(mine_own)

    threads = [threading.Thread(target=worker) for _ in range(conc)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat.sort()
    own.sort()
    pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000  # noqa: E731
    out = {"requests": len(lat), "errors": errors[0], "requests_per_s": len(lat) / wall,
           "p50_ms": pct(0.50), "p90_ms": pct(0.90), "p99_ms": pct(0.99)}
    if own:
        out["own_p50_ms"] = own[len(own) // 2]
        out["own_p99_ms"] = own[min(len(own) - 1, int(0.99 * len(own)))]
    return out


def main() -> int:
    p = arguments(__doc__)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--stream", action="store_true")
    p.add_argument("--pool-connections", type=int, default=None,
                   help="the gateway's [upstream] pool_connections (default: its own)")
    a = p.parse_args()
    os.environ["FAIRSCHED_BIN_DIR"] = str(Path(a.build) / "bin")
    import conftest  # noqa: E402  (reads FAIRSCHED_BIN_DIR)

    d = Path(tempfile.mkdtemp(prefix="fsgwb-", dir="/tmp"))
    stack = conftest.Stack(d)
    try:
        over = {}
        if a.pool_connections is not None:
            over["upstream_pool_connections"] = a.pool_connections
        stack.start(upstream_args=("--token-ms", "0"), log_level='"warn"',
                    upstream_max_sequences=max(64, a.concurrency), **over)
        body = {"model": "m", "prompt": "benchmark prompt " * 8, "max_tokens": a.max_tokens,
                "stream": a.stream}
        key = conftest.KEYS["alice"][0]
        warm = max(a.concurrency * 5, 50)
        run(stack.upstream_port, None, warm, a.concurrency, body)
        run(stack.port, key, warm, a.concurrency, body)
        direct = run(stack.upstream_port, None, a.requests, a.concurrency, body)
        before = stack.upstream_stats()["connections"]
        gateway = run(stack.port, key, a.requests, a.concurrency, body)
        gateway["upstream_connections"] = stack.upstream_stats()["connections"] - before
        out = {"scenario": "gateway", "requests": a.requests, "concurrency": a.concurrency,
               "max_tokens": a.max_tokens, "stream": a.stream, "direct": direct,
               "gateway": gateway,
               "added_p50_ms": gateway["p50_ms"] - direct["p50_ms"],
               "added_p99_ms": gateway["p99_ms"] - direct["p99_ms"]}
        print(f"{'':8} {'req/s':>9} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'errors':>6}")
        for name, r in (("direct", direct), ("gateway", gateway)):
            print(f"{name:8} {r['requests_per_s']:9.0f} {r['p50_ms']:8.2f} {r['p90_ms']:8.2f} "
                  f"{r['p99_ms']:8.2f} {r['errors']:6d}")
        print(f"added by the gateway: p50 {out['added_p50_ms']:.2f} ms, "
              f"p99 {out['added_p99_ms']:.2f} ms")
        if "own_p50_ms" in gateway:
            print(f"the gateway's own time (x-fairsched-overhead-ms): p50 "
                  f"{gateway['own_p50_ms']:.3f} ms, p99 {gateway['own_p99_ms']:.3f} ms")
        print(f"upstream connections the gateway opened: {gateway['upstream_connections']} "
              f"for {gateway['requests']} requests")
        write_json(a.json, out)
        return 0 if direct["errors"] == 0 and gateway["errors"] == 0 else 1
    finally:
        stack.stop()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
