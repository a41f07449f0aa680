#!/usr/bin/env python3
"""Writes a synthetic multi-tenant trace for a continuous-batching worker
endpoint, the kind fairness studies of LLM serving use: a few heavy tenants
with long outputs (Poisson arrivals), bursty mid-size tenants (gamma
arrivals, squared coefficient of variation 1/shape), and many light tenants
with short requests (Poisson). Every request asks for more output
(max_output_tokens) than it produces (output_tokens), as real ones do.

The arrival rates are scaled so the offered work is `--load` times what the
engine of bench/traces/multitenant.toml can do, by its cost model: a request
of i prompt and o output tokens costs i × prefill_token_us + o ×
(step_us / max_sequences + decode_token_us) of engine time at full batch.
Heavy tenants bring 55 % of the work, mid 35 %, light 10 %.

Deterministic for a seed. The committed examples:

    python3 bench/traces/make_multitenant_trace.py > bench/traces/multitenant.jsonl
    python3 bench/traces/make_multitenant_trace.py --duration 30 --heavy 2 --mid 2 \
        --light 6 --speedup 10 > bench/traces/multitenant-real.jsonl
"""
import argparse
import json
import random
import sys

# bench/traces/multitenant.toml, [endpoints.chat.engine]
ENGINE = {"max_sequences": 32, "step_us": 6000.0, "prefill_token_us": 4.0,
          "decode_token_us": 250.0}
SHARES = {"heavy": 0.55, "mid": 0.35, "light": 0.10}


def classes(n_heavy, n_mid, n_light):
    """name prefix, count, arrival process, request sizes."""
    return [
        ("heavy", n_heavy, "poisson",
         lambda r: (r.randint(300, 1500), min(2000, max(50, int(r.lognormvariate(6.4, 0.6)))), 2048)),
        ("mid", n_mid, "gamma",
         lambda r: (r.randint(500, 3000), r.randint(100, 400), 512)),
        ("light", n_light, "poisson",
         lambda r: (r.randint(50, 600), r.randint(10, 120), 256)),
    ]


def cost_s(inp, out):
    per_out = ENGINE["step_us"] / ENGINE["max_sequences"] + ENGINE["decode_token_us"]
    return (inp * ENGINE["prefill_token_us"] + out * per_out) / 1e6


def mean_cost(sizes, rng, n=4000):
    return sum(cost_s(*sizes(rng)[:2]) for _ in range(n)) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--duration", type=float, default=1200.0, help="seconds of arrivals")
    ap.add_argument("--load", type=float, default=1.25, help="offered work / engine capacity")
    ap.add_argument("--heavy", type=int, default=3)
    ap.add_argument("--mid", type=int, default=4)
    ap.add_argument("--light", type=int, default=24)
    ap.add_argument("--gamma-shape", type=float, default=0.15,
                    help="mid tenants' inter-arrival gamma shape (< 1: bursty)")
    ap.add_argument("--endpoint", default="chat")
    ap.add_argument("--speedup", type=float, default=1.0,
                    help="arrival rates times K, for an engine K times faster "
                         "(multitenant-real.toml: 10)")
    args = ap.parse_args()

    rng = random.Random(args.seed)
    out = []
    for name, count, process, sizes in classes(args.heavy, args.mid, args.light):
        if count == 0:
            continue
        # requests/s per tenant so the class brings its share of the load
        rate = (SHARES[name] * args.load * args.speedup / mean_cost(sizes, random.Random(1))
                / count)
        for k in range(count):
            tenant = "%s-%d" % (name, k + 1)
            t = 0.0
            while True:
                if process == "gamma":
                    shape = args.gamma_shape
                    t += rng.gammavariate(shape, 1.0 / (shape * rate))
                else:
                    t += rng.expovariate(rate)
                if t >= args.duration:
                    break
                inp, outp, max_out = sizes(rng)
                out.append({"t": round(t, 6), "tenant": tenant, "endpoint": args.endpoint,
                            "input_tokens": inp, "output_tokens": outp,
                            "max_output_tokens": max(max_out, outp)})
    out.sort(key=lambda r: r["t"])
    for r in out:
        sys.stdout.write(json.dumps(r, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
