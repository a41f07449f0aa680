#!/usr/bin/env python3
"""Writes a synthetic multi-tenant trace whose prompts share prefixes, the
kind a multi-tenant LLM platform sees, for studying prefix (KV) caching:

  sys-N   one system prompt (+ few-shot examples) per tenant, 500-4,000
          tokens, sent with every request, then a short unique user turn
          (30-300 tokens); output 20-200 tokens.
  chat-N  several concurrent conversations per tenant whose prefix grows
          turn by turn: the tenant's system prompt segment "chat-N-sys"
          (200-800 tokens), then per earlier turn j of conversation k a
          segment "chat-N-c<k>-t<j>" holding that turn's user message and
          the assistant's answer (its unique tokens + its output tokens, so
          60-500); the new user message is unique (30-200 tokens); 3-12
          turns, the next one an exponential think time (mean 10 s) after
          the previous arrival, so conversations interleave; output 30-300.
  doc-N   many questions (a few hundred over the trace) about one or two
          long documents "doc-N-d<m>" (6,000-12,000 tokens each); the
          question is unique (20-100 tokens); output 20-150 tokens.
  solo-N  nothing shared: input 200-2,000 tokens, output 20-300.

Arrivals are Poisson per tenant (chat: conversation starts), except every
third tenant of each class (a third of all), whose inter-arrival times are
gamma with shape --gamma-shape (< 1: bursty). Every request asks for more
output (max_output_tokens: 256 or 512) than it produces (output_tokens).

A line is one request, sorted by t; "prefix" (omitted when the request
shares nothing) lists, in order, the shared segments the prompt starts
with: the first tokens are segment 1's `tokens`, then segment 2's, ...; the
same id always names the same token content. The rest of the prompt
(input_tokens minus the segments' sum) is unique to the request. A chat
turn's unique part and output reappear in later turns as its segment, but
the trace names them only from the next turn on.

Load: the trace is replayed on --replicas identical engines with the cost
model of bench/traces/prefix-heavy.toml, [endpoints.chat.engine]: a request
of i prompt and o output tokens costs i × prefill_token_us + o ×
(step_us / max_sequences + decode_token_us) of engine time at full batch.
Each class's arrival rate is scaled (a few fixed-point passes over the
actual draws) so the work offered without any prefix cache, every prompt
token prefilled, is --load times what the replicas can do over --duration,
split between the classes by --share-*. The totals go to stderr: requests,
offered work, prefill's share of it, the fraction of prompt tokens in
shared segments, and the distinct 16-token blocks the shared segments
cover, counted per segment chain (a full block is the same wherever the
same chain of segments leads up to it, as a block-hashing prefix cache
sees it; blocks that run into a request's unique part are not counted).

--check FILE validates a trace instead (JSON objects, sorted by t, the
fields, prefix segments within input_tokens, one token count per segment
id, max_output_tokens above output_tokens) and prints its totals.

Deterministic for a seed. The committed trace (three heavy document
tenants bring half the work; offered 5 times what 4 replicas can do
without a cache, so that with one the total time measures throughput):

    python3 bench/traces/make_prefix_trace.py --duration 36 --load 5 \\
        --share-doc 0.5 --share-sys 0.2 --share-chat 0.2 --share-solo 0.1 \\
        > bench/traces/prefix-heavy.jsonl
    python3 bench/traces/make_prefix_trace.py --check bench/traces/prefix-heavy.jsonl
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
from dataclasses import dataclass
from typing import Any, Iterable

# bench/traces/prefix-heavy.toml, [endpoints.chat.engine]
ENGINE = {"max_sequences": 32, "step_us": 6000.0, "prefill_token_us": 25.0,
          "decode_token_us": 100.0}
BLOCK_TOKENS = 16
CLASSES = ("sys", "chat", "doc", "solo")
Range = tuple[int, int]
Request = dict[str, Any]


@dataclass(frozen=True)
class Params:
    """The workload's sizes (inclusive ranges of tokens) and processes."""
    sys_prompt: Range
    sys_user: Range
    sys_output: Range
    chat_system: Range
    chat_user: Range
    chat_output: Range
    chat_turns: Range
    chat_think_s: float
    doc_tokens: Range
    doc_docs: Range
    doc_question: Range
    doc_output: Range
    solo_input: Range
    solo_output: Range
    gamma_shape: float
    bursty_every: int
    endpoint: str
    duration: float


def max_output_for(out: Range) -> int:
    """The smallest of 256, 512, 1024, ... above the output range."""
    m = 256
    while m <= out[1]:
        m *= 2
    return m


def cost_s(inp: int, out: int) -> float:
    """Engine seconds of a request at full batch, every prompt token prefilled."""
    per_out = ENGINE["step_us"] / ENGINE["max_sequences"] + ENGINE["decode_token_us"]
    return (inp * ENGINE["prefill_token_us"] + out * per_out) / 1e6


def arrivals(rng: random.Random, rate: float, bursty: bool, shape: float,
             duration: float) -> Iterable[float]:
    """Arrival times in [0, duration): Poisson, or gamma renewal if bursty."""
    t = 0.0
    while True:
        if bursty:
            t += rng.gammavariate(shape, 1.0 / (shape * rate))
        else:
            t += rng.expovariate(rate)
        if t >= duration:
            return
        yield t


def rint(rng: random.Random, r: Range) -> int:
    return rng.randint(r[0], r[1])


def request(t: float, tenant: str, p: Params, inp: int, out: int, max_out: int,
            prefix: list[tuple[str, int]]) -> Request:
    r: Request = {"t": round(t, 6), "tenant": tenant, "endpoint": p.endpoint,
                  "input_tokens": inp, "output_tokens": out,
                  "max_output_tokens": max_out}
    if prefix:
        r["prefix"] = [{"id": i, "tokens": n} for i, n in prefix]
    return r


def tenant_requests(cls: str, k: int, rate: float, p: Params, seed: int,
                    spans: list[float] | None = None) -> list[Request]:
    """One tenant's requests. Its own random stream, drawn in the same order
    whatever the rate, so a higher rate only compresses its arrivals. A chat
    tenant adds to `spans` each conversation's time from its first to its
    last turn within the trace."""
    tenant = "%s-%d" % (cls, k)
    rng = random.Random("%d:%s" % (seed, tenant))
    bursty = p.bursty_every > 0 and k % p.bursty_every == 0
    out: list[Request] = []
    if cls == "sys":
        seg = (tenant, rint(rng, p.sys_prompt))
        mo = max_output_for(p.sys_output)
        for t in arrivals(rng, rate, bursty, p.gamma_shape, p.duration):
            inp = seg[1] + rint(rng, p.sys_user)
            out.append(request(t, tenant, p, inp, rint(rng, p.sys_output), mo, [seg]))
    elif cls == "chat":
        system = (tenant + "-sys", rint(rng, p.chat_system))
        mo = max_output_for(p.chat_output)
        for c, start in enumerate(arrivals(rng, rate, bursty, p.gamma_shape, p.duration), 1):
            # Drawn whole before truncation, to keep the stream aligned.
            turns = rint(rng, p.chat_turns)
            t = last = start
            prefix = [system]
            for j in range(1, turns + 1):
                user, answer = rint(rng, p.chat_user), rint(rng, p.chat_output)
                think = rng.expovariate(1.0 / p.chat_think_s)
                if t < p.duration:
                    inp = sum(n for _, n in prefix) + user
                    out.append(request(t, tenant, p, inp, answer, mo, list(prefix)))
                    last = t
                prefix.append(("%s-c%d-t%d" % (tenant, c, j), user + answer))
                t += think
            if spans is not None:
                spans.append(last - start)
    elif cls == "doc":
        docs = [("%s-d%d" % (tenant, m), rint(rng, p.doc_tokens))
                for m in range(1, rint(rng, p.doc_docs) + 1)]
        mo = max_output_for(p.doc_output)
        for t in arrivals(rng, rate, bursty, p.gamma_shape, p.duration):
            doc = docs[rng.randrange(len(docs))]
            inp = doc[1] + rint(rng, p.doc_question)
            out.append(request(t, tenant, p, inp, rint(rng, p.doc_output), mo, [doc]))
    elif cls == "solo":
        mo = max_output_for(p.solo_output)
        for t in arrivals(rng, rate, bursty, p.gamma_shape, p.duration):
            out.append(request(t, tenant, p, rint(rng, p.solo_input),
                               rint(rng, p.solo_output), mo, []))
    else:
        raise ValueError(cls)
    return out


def work_s(reqs: Iterable[Request]) -> float:
    return sum(cost_s(r["input_tokens"], r["output_tokens"]) for r in reqs)


def class_requests(cls: str, count: int, target_s: float, p: Params, seed: int,
                   passes: int = 40) -> tuple[float, list[Request]]:
    """The class's per-tenant rate and requests, the rate scaled (then
    bisected, a burst can add many requests at once) until the class's work
    is within 0.5 % of target_s; after `passes` tries, the closest."""
    def gen(rate: float) -> list[Request]:
        return [r for k in range(1, count + 1) for r in tenant_requests(cls, k, rate, p, seed)]

    lo, hi = 0.0, math.inf
    rate = 1.0
    best: tuple[float, float, list[Request]] = (math.inf, rate, [])
    for _ in range(passes):
        reqs = gen(rate)
        w = work_s(reqs)
        err = abs(w / target_s - 1.0)
        if err < best[0]:
            best = (err, rate, reqs)
        if err < 0.005:
            break
        if w < target_s:
            lo = rate
        else:
            hi = rate
        guess = rate * target_s / w if w > 0 else rate * 10.0
        rate = guess if lo < guess < hi else (lo + hi) / 2.0
    return best[1], best[2]


def totals(reqs: list[Request], replicas: int, duration: float) -> list[str]:
    """The trace's totals, one line each."""
    prefill = sum(r["input_tokens"] for r in reqs) * ENGINE["prefill_token_us"] / 1e6
    work = work_s(reqs)
    prompt = sum(r["input_tokens"] for r in reqs)
    shared = sum(s["tokens"] for r in reqs for s in r.get("prefix", []))
    segments: dict[str, int] = {}
    chains: dict[tuple[str, ...], int] = {}
    blocks: set[tuple[int, int]] = set()
    block_refs = 0
    for r in reqs:
        segs = r.get("prefix", [])
        end = 0
        for i, s in enumerate(segs):
            segments[s["id"]] = s["tokens"]
            chain = chains.setdefault(tuple(x["id"] for x in segs[:i + 1]), len(chains))
            start, end = end, end + s["tokens"]
            # Full blocks whose last token lies in this segment: their content
            # is fixed by the chain of segments up to it and their position.
            for b in range(start // BLOCK_TOKENS, end // BLOCK_TOKENS):
                if (b + 1) * BLOCK_TOKENS > start:
                    blocks.add((chain, b))
                    block_refs += 1
    per_class: dict[str, int] = {}
    for r in reqs:
        c = r["tenant"].rsplit("-", 1)[0]
        per_class[c] = per_class.get(c, 0) + 1
    cap = replicas * duration
    return [
        "requests: %d (%s), tenants %d, t %.3f-%.3f s"
        % (len(reqs), ", ".join("%s %d" % kv for kv in sorted(per_class.items())),
           len({r["tenant"] for r in reqs}), reqs[0]["t"] if reqs else 0.0,
           reqs[-1]["t"] if reqs else 0.0),
        "offered work (no prefix cache): %.1f engine-s = %.3f x %d replicas x %.0f s"
        % (work, work / cap if cap else 0.0, replicas, duration),
        "prefill share of the work: %.1f %% (%d prompt tokens, %d output tokens)"
        % (100.0 * prefill / work if work else 0.0, prompt,
           sum(r["output_tokens"] for r in reqs)),
        "shared segments: %d distinct, %d tokens; prompt tokens in shared segments: %.1f %%"
        % (len(segments), sum(segments.values()), 100.0 * shared / prompt if prompt else 0.0),
        "distinct %d-token prefix blocks (per segment chain): %d (%d KV tokens); "
        "block references %d; prompt tokens in a block seen before: %.1f %%"
        % (BLOCK_TOKENS, len(blocks), len(blocks) * BLOCK_TOKENS, block_refs,
           100.0 * (block_refs - len(blocks)) * BLOCK_TOKENS / prompt if prompt else 0.0),
    ]


def check(path: str) -> tuple[list[Request], list[str]]:
    """The trace's requests and every rule a line breaks (empty: valid)."""
    errors: list[str] = []
    reqs: list[Request] = []
    seg_tokens: dict[str, int] = {}
    last_t = -math.inf

    def is_count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2 ** 32

    with open(path, encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            err: list[str] = []
            if not text.strip():
                continue  # blank lines are skipped, as the replayer does
            try:
                r = json.loads(text)
            except json.JSONDecodeError as e:
                errors.append("line %d: not valid JSON (%s)" % (n, e))
                continue
            if not isinstance(r, dict):
                errors.append("line %d: not a JSON object" % n)
                continue
            t = r.get("t")
            if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t) \
                    or t < 0:
                err.append("t must be a non-negative number")
            elif t < last_t:
                err.append("t %s before the previous line's %s" % (t, last_t))
            else:
                last_t = t
            for k in ("tenant", "endpoint"):
                if not isinstance(r.get(k), str) or not r[k]:
                    err.append("%s must be a non-empty string" % k)
            for k in ("input_tokens", "output_tokens", "max_output_tokens"):
                if not is_count(r.get(k)):
                    err.append("%s must be a 32-bit non-negative integer" % k)
            if not err and r["max_output_tokens"] <= r["output_tokens"]:
                err.append("max_output_tokens must exceed output_tokens")
            if "prefix" in r:
                segs = r["prefix"]
                if not isinstance(segs, list) or not segs:
                    err.append("prefix must be a non-empty list (omit it instead)")
                    segs = []
                seen: set[str] = set()
                total = 0
                for s in segs:
                    if not isinstance(s, dict) or set(s) != {"id", "tokens"} \
                            or not isinstance(s["id"], str) or not s["id"] \
                            or not is_count(s["tokens"]) or s["tokens"] == 0:
                        err.append("prefix segment %r must be {id: non-empty string, "
                                   "tokens: positive integer}" % (s,))
                        continue
                    if s["id"] in seen:
                        err.append("prefix segment %s twice" % s["id"])
                    seen.add(s["id"])
                    if seg_tokens.setdefault(s["id"], s["tokens"]) != s["tokens"]:
                        err.append("segment %s has %d tokens, %d before"
                                   % (s["id"], s["tokens"], seg_tokens[s["id"]]))
                    total += s["tokens"]
                if is_count(r.get("input_tokens")) and total > r["input_tokens"]:
                    err.append("prefix segments sum to %d > input_tokens %d"
                               % (total, r["input_tokens"]))
            errors.extend("line %d: %s" % (n, e) for e in err)
            if not err:
                reqs.append(r)
    return reqs, errors


def range_arg(ap: argparse._ArgumentGroup | argparse.ArgumentParser, name: str,
              default: Range, help: str) -> None:
    ap.add_argument(name, type=int, nargs=2, metavar=("LO", "HI"), default=default,
                    help="%s (default %d %d)" % (help, *default))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=20261215)
    ap.add_argument("--duration", type=float, default=120.0, help="seconds of arrivals")
    ap.add_argument("--speedup", type=float, default=1.0,
                    help="divide every arrival time by this (for replaying through real "
                         "processes with an engine this many times faster; the totals "
                         "printed are those before)")
    ap.add_argument("--load", type=float, default=2.0,
                    help="offered work without a prefix cache / capacity of the replicas")
    ap.add_argument("--replicas", type=int, default=4, help="identical engines replayed on")
    ap.add_argument("--endpoint", default="chat")
    ap.add_argument("--check", metavar="FILE",
                    help="validate FILE and print its totals instead of writing a trace")
    g = ap.add_argument_group("tenants")
    g.add_argument("--sys", type=int, default=12)
    g.add_argument("--chat", type=int, default=6)
    g.add_argument("--doc", type=int, default=3)
    g.add_argument("--solo", type=int, default=3)
    g.add_argument("--gamma-shape", type=float, default=0.2,
                   help="bursty tenants' inter-arrival gamma shape (< 1: bursty)")
    g.add_argument("--bursty-every", type=int, default=3,
                   help="tenant k of each class is bursty when k %% this == 0 (0: none)")
    s = ap.add_argument_group("shares of the offered work (normalized)")
    s.add_argument("--share-sys", type=float, default=0.40)
    s.add_argument("--share-chat", type=float, default=0.25)
    s.add_argument("--share-doc", type=float, default=0.25)
    s.add_argument("--share-solo", type=float, default=0.10)
    z = ap.add_argument_group("sizes (tokens, inclusive ranges)")
    range_arg(z, "--sys-prompt", (500, 4000), "a sys tenant's system prompt, drawn per tenant")
    range_arg(z, "--sys-user", (30, 300), "a sys request's unique user turn")
    range_arg(z, "--sys-output", (20, 200), "a sys request's output")
    range_arg(z, "--chat-system", (200, 800), "a chat tenant's system prompt")
    range_arg(z, "--chat-user", (30, 200), "a chat turn's new user message")
    range_arg(z, "--chat-output", (30, 300), "a chat turn's answer")
    range_arg(z, "--chat-turns", (3, 12), "turns per conversation")
    z.add_argument("--chat-think-s", type=float, default=10.0,
                   help="mean think time between a conversation's turns (exponential)")
    range_arg(z, "--doc-tokens", (6000, 12000), "a document")
    range_arg(z, "--doc-docs", (1, 2), "documents per doc tenant")
    range_arg(z, "--doc-question", (20, 100), "a question's unique tokens")
    range_arg(z, "--doc-output", (20, 150), "an answer")
    range_arg(z, "--solo-input", (200, 2000), "a solo request's prompt")
    range_arg(z, "--solo-output", (20, 300), "a solo request's output")
    args = ap.parse_args()

    if args.check:
        reqs, errors = check(args.check)
        for line in totals(reqs, args.replicas, args.duration):
            print(line, file=sys.stderr)
        for e in errors[:20]:
            print("error: " + e, file=sys.stderr)
        print("%s: %d good lines, %s" % (args.check, len(reqs),
                                       "%d errors" % len(errors) if errors else "valid"),
              file=sys.stderr)
        return 1 if errors or not reqs else 0

    def rg(name: str) -> Range:
        lo, hi = getattr(args, name)
        if not 0 <= lo <= hi:
            ap.error("--%s: need 0 <= LO <= HI" % name.replace("_", "-"))
        return (lo, hi)

    if args.chat_turns[0] < 1 or args.doc_docs[0] < 1 or args.sys_prompt[0] < 1 \
            or args.chat_system[0] < 1 or args.doc_tokens[0] < 1:
        ap.error("turns, documents and shared segments need at least 1")
    p = Params(rg("sys_prompt"), rg("sys_user"), rg("sys_output"), rg("chat_system"),
               rg("chat_user"), rg("chat_output"), rg("chat_turns"), args.chat_think_s,
               rg("doc_tokens"), rg("doc_docs"), rg("doc_question"), rg("doc_output"),
               rg("solo_input"), rg("solo_output"), args.gamma_shape, args.bursty_every,
               args.endpoint, args.duration)
    counts = {"sys": args.sys, "chat": args.chat, "doc": args.doc, "solo": args.solo}
    shares = {"sys": args.share_sys, "chat": args.share_chat, "doc": args.share_doc,
              "solo": args.share_solo}
    active = [c for c in CLASSES if counts[c] > 0 and shares[c] > 0]
    norm = sum(shares[c] for c in active)
    target = args.load * args.replicas * args.duration
    out: list[Request] = []
    for c in active:
        rate, reqs = class_requests(c, counts[c], target * shares[c] / norm, p, args.seed)
        what = "requests/s each"
        if c == "chat":
            spans: list[float] = []
            for k in range(1, counts[c] + 1):
                tenant_requests(c, k, rate, p, args.seed, spans)
            what = "conversations/s each (%d in all, on average %.1f open per tenant)" % (
                len(spans), sum(spans) / (counts[c] * args.duration))
        print("%s: %d tenants, %.3f %s, %d requests, %.1f engine-s"
              % (c, counts[c], rate, what, len(reqs), work_s(reqs)), file=sys.stderr)
        out.extend(reqs)
    out.sort(key=lambda r: (r["t"], r["tenant"]))
    if args.speedup <= 0:
        ap.error("--speedup: must be > 0")
    for r in out:
        line = dict(r, t=round(r["t"] / args.speedup, 6)) if args.speedup != 1.0 else r
        sys.stdout.write(json.dumps(line, separators=(",", ":")) + "\n")
    for line in totals(out, args.replicas, args.duration):
        print(line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
