#!/usr/bin/env python3
"""Writes example.jsonl: the trace `fairsched-bench replay` ships with.

Five tenants on endpoint chat over 300 s: four steady ones (Poisson, 10
requests/s each) and one bursty one (2,000 requests within 2 s at 30, 105,
180 and 255 s). With bench/traces/example.toml the executor serves about 60
such requests/s, so the steady tenants alone use about 2/3 of it and every
burst overloads it for a while. Deterministic: the same file on every run.

    python3 bench/traces/make_example_trace.py > bench/traces/example.jsonl
"""
import json
import random
import sys

SEED = 20240601
DURATION_S = 300.0
STEADY = ["acme", "globex", "initech", "umbrella"]
STEADY_RATE = 10.0
BURSTY = "batchco"
BURSTS_AT = [30.0, 105.0, 180.0, 255.0]
BURST_SIZE = 2000
BURST_SPREAD_S = 2.0


def request(rng, t, tenant):
    return {"t": round(t, 6), "tenant": tenant, "endpoint": "chat",
            "input_tokens": rng.randint(100, 900), "output_tokens": rng.randint(20, 300)}


def main():
    rng = random.Random(SEED)
    out = []
    for tenant in STEADY:
        t = rng.expovariate(STEADY_RATE)
        while t < DURATION_S:
            out.append(request(rng, t, tenant))
            t += rng.expovariate(STEADY_RATE)
    for start in BURSTS_AT:
        for _ in range(BURST_SIZE):
            out.append(request(rng, start + rng.uniform(0, BURST_SPREAD_S), BURSTY))
    out.sort(key=lambda r: r["t"])
    for r in out:
        sys.stdout.write(json.dumps(r, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
