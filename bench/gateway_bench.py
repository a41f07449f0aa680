#!/usr/bin/env python3
"""fairsched-gateway against calling the upstream directly, in the same run.

Starts fairschedd, the fake OpenAI upstream (tests/gateway/fake_upstream.py,
no per-token delay, so what is measured is the path, not an engine) and the
gateway; then, with the same client (threads, one keep-alive connection
each), sends the same requests to the upstream directly and through the
gateway. Prints requests/s and latency percentiles of both, the latency the
gateway adds, the gateway's own time by its x-fairsched-overhead-ms header,
the upstream connections the gateway opened (--pool-connections 0: one
per request, as before the pool), and the CPU the gateway and fairschedd
spent per request (from /proc/PID/stat over the gateway run).

--idle-streams N then opens N more streaming requests, each on its own
connection, that stay open without a token (the upstream holds the first
64, the daemon queues the rest): the gateway's and the daemon's resident
memory per open stream, /healthz's latency meanwhile, and, once the callers
hang up, every one of them counted cancelled by the daemon.

  bench/gateway_bench.py [--build build] [--requests 2000] [--concurrency 8]
                         [--max-tokens 8] [--stream] [--pool-connections N]
                         [--idle-streams N] [--json OUT]
"""

from __future__ import annotations

import asyncio
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


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def healthz_ms(port: int, n: int = 20) -> float:
    """The median of `n` GET /healthz on one connection."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        c.request("GET", "/healthz")
        c.getresponse().read()
        lat.append(time.perf_counter() - t0)
    c.close()
    return sorted(lat)[n // 2] * 1000


async def open_streams(port: int, key: str, n: int) -> list:
    """`n` connections, each with a streaming request sent and nothing read."""
    body = json.dumps({"model": "hang", "prompt": "idle", "max_tokens": 16,
                       "stream": True}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    conns = []
    for i in range(0, n, 500):
        batch = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", port)
                                       for _ in range(min(500, n - i))))
        for _, w in batch:
            w.write(head + body)
        await asyncio.gather(*(w.drain() for _, w in batch))
        conns.extend(batch)
    return conns


def idle_streams(stack, n: int) -> dict:
    gw, dm = stack.gateway.proc.pid, stack.daemon.proc.pid
    before = {"gateway": rss_bytes(gw), "daemon": rss_bytes(dm)}
    health_before = healthz_ms(stack.port)
    cancelled_before = stack.tenant_counts("alice")
    loop = asyncio.new_event_loop()
    t0 = time.perf_counter()
    conns = loop.run_until_complete(open_streams(stack.port, stack_key(), n))
    # Every one submitted: the daemon queues or runs them all.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        c = stack.tenant_counts("alice")
        if c["queued"] + c["in_flight"] >= n:
            break
        time.sleep(0.2)
    opened_s = time.perf_counter() - t0
    held = stack.tenant_counts("alice")
    time.sleep(1.0)
    during = {"gateway": rss_bytes(gw), "daemon": rss_bytes(dm)}
    health_during = healthz_ms(stack.port)
    for _, w in conns:
        w.close()
    loop.run_until_complete(asyncio.sleep(0.1))
    loop.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        c = stack.tenant_counts("alice")
        if c["queued"] + c["in_flight"] == 0:
            break
        time.sleep(0.2)
    after = stack.tenant_counts("alice")
    return {"streams": n, "open_s": opened_s,
            "held": held["queued"] + held["in_flight"],
            "gateway_rss_per_stream_bytes": (during["gateway"] - before["gateway"]) / n,
            "daemon_rss_per_stream_bytes": (during["daemon"] - before["daemon"]) / n,
            "gateway_rss_bytes": during["gateway"], "daemon_rss_bytes": during["daemon"],
            "healthz_ms_before": health_before, "healthz_ms_during": health_during,
            "left_after_hang_up": after["queued"] + after["in_flight"],
            "left_queued": after["queued"], "left_in_flight": after["in_flight"],
            "cancelled": after["cancelled"] - cancelled_before["cancelled"],
            "completed": after["completed"] - cancelled_before["completed"]}


def stack_key() -> str:
    import conftest
    return conftest.KEYS["alice"][0]


def main() -> int:
    p = arguments(__doc__)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--stream", action="store_true")
    p.add_argument("--idle-streams", type=int, default=0,
                   help="then hold this many streams open without a token (memory per stream)")
    p.add_argument("--pool-connections", type=int, default=None,
                   help="the gateway's [upstream] pool_connections (default: its own)")
    a = p.parse_args()
    os.environ["FAIRSCHED_BIN_DIR"] = str(Path(a.build) / "bin")
    import conftest  # noqa: E402  (reads FAIRSCHED_BIN_DIR)

    d = Path(tempfile.mkdtemp(prefix="fsgwb-", dir="/tmp"))
    stack = conftest.Stack(d)
    keep = os.environ.get("FAIRSCHED_BENCH_KEEP")  # keep the logs' directory
    try:
        over = {}
        if a.pool_connections is not None:
            over["upstream_pool_connections"] = a.pool_connections
        if a.idle_streams:
            over["max_connections"] = a.idle_streams + 1024
            over["request_timeout_ms"] = 600000
            # The held streams' upstream calls never answer: no timeout ends them.
            over["upstream_response_timeout_ms"] = 600000
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
        gw_pid, dm_pid = stack.gateway.proc.pid, stack.daemon.proc.pid
        cpu_before = (cpu_s(gw_pid), cpu_s(dm_pid))
        gateway = run(stack.port, key, a.requests, a.concurrency, body)
        gateway["upstream_connections"] = stack.upstream_stats()["connections"] - before
        gateway["gateway_cpu_us_per_request"] = (
            (cpu_s(gw_pid) - cpu_before[0]) / gateway["requests"] * 1e6)
        gateway["daemon_cpu_us_per_request"] = (
            (cpu_s(dm_pid) - cpu_before[1]) / gateway["requests"] * 1e6)
        gateway["gateway_rss_bytes"] = rss_bytes(gw_pid)
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
        print(f"CPU per request: gateway {gateway['gateway_cpu_us_per_request']:.0f} µs, "
              f"fairschedd {gateway['daemon_cpu_us_per_request']:.0f} µs; gateway resident "
              f"{gateway['gateway_rss_bytes'] / 2**20:.1f} MiB")
        ok = direct["errors"] == 0 and gateway["errors"] == 0
        if a.idle_streams:
            idle = idle_streams(stack, a.idle_streams)
            out["idle_streams"] = idle
            print(f"{idle['streams']} idle streams (held {idle['held']}, opened in "
                  f"{idle['open_s']:.1f} s): gateway +{idle['gateway_rss_per_stream_bytes']:.0f} "
                  f"B resident each ({idle['gateway_rss_bytes'] / 2**20:.1f} MiB in all), "
                  f"fairschedd +{idle['daemon_rss_per_stream_bytes']:.0f} B each; /healthz "
                  f"{idle['healthz_ms_before']:.2f} ms before, {idle['healthz_ms_during']:.2f} ms "
                  f"during; after the hang-ups {idle['left_queued']} queued and "
                  f"{idle['left_in_flight']} running left, "
                  f"{idle['cancelled']} counted cancelled, {idle['completed']} completed")
            ok = ok and idle["held"] >= idle["streams"] and idle["left_after_hang_up"] == 0
        write_json(a.json, out)
        return 0 if ok else 1
    finally:
        stack.stop()
        if keep:
            print(f"logs kept in {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
