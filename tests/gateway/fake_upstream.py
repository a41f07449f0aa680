#!/usr/bin/env python3
"""A small OpenAI-compatible server for the gateway's tests and benchmark.

Speaks what vLLM and SGLang speak on /v1/completions and
/v1/chat/completions: JSON, or with "stream": true server-sent events
(one chunk per token, then a usage chunk when stream_options.include_usage,
then "data: [DONE]") over chunked transfer encoding; GET /v1/models; POST
/v1/embeddings (a 4-number vector per input).

Token i of a response is "t<i> " (so a test can count them); the response
has max_tokens tokens. The model name picks a behaviour:
  "slow"        --slow-ms between tokens instead of --token-ms
  "fail"        HTTP 500 with an OpenAI error body
  "bad-request" HTTP 400 with an OpenAI error body
  "hang"        never answers (until the connection closes)
  "held"        streams its first token, then holds the rest until GET /release
  "ping-held"   sends its header and an SSE comment in one write, then holds
                its tokens until GET /release
  "drop"        streams 2 tokens, then closes the connection without [DONE]
  "short-usage" reports a usage of 1 prompt token whatever the prompt

GET /stats: {"requests", "running", "max_running", "disconnects", "connections",
"closed", "health_checks", "prompts": [...]} ("connections": those that carried
an API call; "closed": how many of them this server has closed). GET
/release: lets every "held" stream, now and later, go on. GET /health: 200,
or 503 while --unhealthy-file exists.
--keep-alive-s closes a connection idle that long (as uvicorn does after 5 s).
--engine-slots N runs at most N calls at once, the rest waiting in a FIFO,
as an engine's scheduler does; GET /metrics then says so as vLLM does
(vllm:num_requests_running, vllm:num_requests_waiting,
vllm:kv_cache_usage_perc), and /stats adds "engine": its peaks, the order
calls arrived and were admitted in ("log"), and the
seconds integrated over time of calls running and waiting (GET /stats/reset
starts them again). --engine-priority orders the waiting calls by the
body's "priority" as vLLM's (lower_first) or SGLang's (higher_first)
priority scheduling does.
--prefix-cache-blocks N models an engine's automatic prefix caching: the
prompt text in blocks of 64 bytes (16 "tokens"), each keyed by a hash of
the whole prefix up to it, the N most recently used kept; a call's leading
blocks found there are hits. GET /metrics says so as vLLM does
(vllm:prefix_cache_queries and vllm:prefix_cache_hits, in tokens), and
/stats adds "prefix_cache": {"queries", "hits", "blocks"}.
Prints "PORT <n>" on stdout once it listens. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

LOCK = threading.Lock()
STATS = {"requests": 0, "running": 0, "max_running": 0, "disconnects": 0, "connections": 0,
         "closed": 0, "health_checks": 0, "prompts": []}
RELEASED = threading.Event()  # GET /release: "held" streams go on
ARGS = argparse.Namespace(token_ms=1.0, slow_ms=200.0, unhealthy_file=None)


class Engine:
    """At most `slots` calls run at once; the rest wait, first come first
    served."""

    def __init__(self, slots: int, priority: str = "off") -> None:
        self.slots = slots
        self.priority = priority  # off (first come), lower_first, higher_first
        self.arrivals = 0
        self.log: list[list] = []  # ["arrive"|"admit", prompt, priority]
        self.cond = threading.Condition()
        self.running = 0
        self.waiting: list[object] = []
        self.max_running = 0
        self.max_waiting = 0
        self.running_s = 0.0
        self.waiting_s = 0.0
        self.since = time.monotonic()

    def _tick(self) -> None:  # under cond
        now = time.monotonic()
        self.running_s += self.running * (now - self.since)
        self.waiting_s += len(self.waiting) * (now - self.since)
        self.since = now

    def enter(self, prompt: str, priority: int) -> None:
        """Waits for a slot: first come first served, or by the body's
        "priority" (then arrival) as vLLM's and SGLang's priority policies
        order their waiting queues."""
        with self.cond:
            self._tick()
            self.arrivals += 1
            rank = {"off": 0, "lower_first": priority, "higher_first": -priority}[self.priority]
            me = (rank, self.arrivals)
            self.waiting.append(me)
            self.log.append(["arrive", prompt, priority])
            self.max_waiting = max(self.max_waiting, len(self.waiting))
            while min(self.waiting) != me or self.running >= self.slots:
                self.cond.wait()
            self._tick()
            self.waiting.remove(me)
            self.log.append(["admit", prompt, priority])
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            self.cond.notify_all()

    def leave(self) -> None:
        with self.cond:
            self._tick()
            self.running -= 1
            self.cond.notify_all()

    def metrics(self) -> str:
        with self.cond:
            run, wait = self.running, len(self.waiting)
        return ("# TYPE vllm:num_requests_running gauge\n"
                f'vllm:num_requests_running{{model_name="test-model"}} {float(run)}\n'
                "# TYPE vllm:num_requests_waiting gauge\n"
                f'vllm:num_requests_waiting{{model_name="test-model"}} {float(wait)}\n'
                "# TYPE vllm:kv_cache_usage_perc gauge\n"
                f'vllm:kv_cache_usage_perc{{model_name="test-model"}} {run / self.slots:.3f}\n')

    def reset(self) -> None:
        with self.cond:
            self._tick()
            self.max_running = self.running
            self.max_waiting = len(self.waiting)
            self.running_s = self.waiting_s = 0.0
            self.log = []

    def stats(self) -> dict:
        with self.cond:
            self._tick()
            return {"slots": self.slots, "running": self.running, "waiting": len(self.waiting),
                    "max_running": self.max_running, "max_waiting": self.max_waiting,
                    "running_s": self.running_s, "waiting_s": self.waiting_s,
                    "log": list(self.log)}


ENGINE: Engine | None = None


class PrefixCache:
    """What an engine's prefix cache would hold of the prompts it served:
    blocks of BLOCK bytes keyed by the hash of the prompt up to the block's
    end, least recently used evicted (a prompt's leading blocks last)."""

    BLOCK = 64
    TOKENS_PER_BLOCK = 16

    def __init__(self, blocks: int) -> None:
        self.capacity = blocks
        self.held: dict[bytes, None] = {}  # insertion order = recency, oldest first
        self.queries = 0  # prompt tokens looked up
        self.hits = 0  # of those, found cached
        self.lock = threading.Lock()

    def serve(self, prompt: str) -> None:
        data = prompt.encode()
        h = hashlib.blake2b(digest_size=16)
        chain = []
        for at in range(0, len(data) - len(data) % self.BLOCK, self.BLOCK):
            h.update(data[at:at + self.BLOCK])
            chain.append(h.copy().digest())
        with self.lock:
            self.queries += max(1, len(data) // 4)
            hit = 0
            while hit < len(chain) and chain[hit] in self.held:
                hit += 1
            self.hits += hit * self.TOKENS_PER_BLOCK
            for key in reversed(chain):  # the leading blocks end up most recent
                self.held.pop(key, None)
                self.held[key] = None
            while len(self.held) > self.capacity:
                del self.held[next(iter(self.held))]

    def metrics(self) -> str:
        with self.lock:
            q, h = self.queries, self.hits
        return ("# TYPE vllm:prefix_cache_queries counter\n"
                f'vllm:prefix_cache_queries_total{{model_name="test-model"}} {float(q)}\n'
                "# TYPE vllm:prefix_cache_hits counter\n"
                f'vllm:prefix_cache_hits_total{{model_name="test-model"}} {float(h)}\n')

    def stats(self) -> dict:
        with self.lock:
            return {"queries": self.queries, "hits": self.hits, "blocks": len(self.held)}


PREFIX_CACHE: PrefixCache | None = None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes

    def log_message(self, fmt, *args):  # quiet
        pass

    def setup(self):
        super().setup()
        self._counted = False

    def handle(self):
        try:
            super().handle()
        finally:
            if self._counted:
                # Closed (FIN sent) before it is counted: a client that saw
                # the count finds the connection closed.
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                with LOCK:
                    STATS["closed"] += 1

    def _count_connection(self) -> None:
        if not self._counted:
            self._counted = True
            with LOCK:
                STATS["connections"] += 1

    def _release(self) -> None:
        """The request stops running: before its last bytes go out, so a
        client that reads them and sends its next request never finds it
        still counted."""
        if getattr(self, "_running", False):
            self._running = False
            with LOCK:
                STATS["running"] -= 1
            if ENGINE is not None:
                ENGINE.leave()

    def _json(self, status: int, obj) -> None:
        body = json.dumps(obj).encode()
        self._release()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/stats/reset" and ENGINE is not None:
            ENGINE.reset()
            self.path = "/stats"
        if self.path == "/release":
            RELEASED.set()
            self._json(200, {"released": True})
            return
        if self.path not in ("/stats", "/health", "/metrics"):
            self._count_connection()
        if self.path == "/metrics" and (ENGINE is not None or PREFIX_CACHE is not None):
            body = ((ENGINE.metrics() if ENGINE is not None else "") +
                    (PREFIX_CACHE.metrics() if PREFIX_CACHE is not None else "")).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/health":
            sick = ARGS.unhealthy_file and os.path.exists(ARGS.unhealthy_file)
            with LOCK:
                STATS["health_checks"] += 1
            self._json(503 if sick else 200, {"status": "unhealthy" if sick else "ok"})
        elif self.path.startswith("/v1/models"):
            self._json(200, {"object": "list",
                             "data": [{"id": "test-model", "object": "model", "owned_by": "tests"}]})
        elif self.path == "/stats":
            with LOCK:
                stats = dict(STATS)
            if ENGINE is not None:
                stats["engine"] = ENGINE.stats()
            if PREFIX_CACHE is not None:
                stats["prefix_cache"] = PREFIX_CACHE.stats()
            self._json(200, stats)
        else:
            self._json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def _chunk(self, data: bytes, into: Optional[bytearray] = None) -> None:
        framed = b"%x\r\n%s\r\n" % (len(data), data)
        if into is not None:  # kept for one write later
            into += framed
            return
        self.wfile.write(framed)
        self.wfile.flush()

    def do_POST(self):
        self._count_connection()
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        chat = self.path.startswith("/v1/chat/completions")
        if self.path.startswith("/v1/embeddings"):
            self._embeddings(body)
            return
        if not (chat or self.path.startswith("/v1/completions")):
            self._json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
            return
        model = body.get("model", "test-model")
        prompt = (json.dumps(body.get("messages")) if chat else str(body.get("prompt", "")))
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        with LOCK:
            STATS["requests"] += 1
            STATS["running"] += 1
            STATS["max_running"] = max(STATS["max_running"], STATS["running"])
            STATS["prompts"].append(prompt[:64])
        self._running = True
        if PREFIX_CACHE is not None:
            PREFIX_CACHE.serve(prompt)
        if ENGINE is not None:
            ENGINE.enter(prompt[:64], int(body.get("priority") or 0))
        try:
            self._serve(body, chat, model, prompt, max_tokens)
        except (BrokenPipeError, ConnectionResetError):
            with LOCK:
                STATS["disconnects"] += 1
        finally:
            self._release()

    def _raise_if_peer_closed(self) -> None:
        self.connection.settimeout(0.0)
        try:
            if self.connection.recv(1) == b"":
                raise BrokenPipeError()
        except BlockingIOError:
            pass
        finally:
            self.connection.settimeout(None)

    def _embeddings(self, body) -> None:
        """One 4-dimensional vector per input; usage counts a token per 4 bytes
        of each string (at least 1), or the ids given."""
        inp = body.get("input")
        items = [inp] if isinstance(inp, str) or (
            isinstance(inp, list) and inp and isinstance(inp[0], int)) else list(inp or [])
        tokens = sum(len(x) if isinstance(x, list) else max(1, len(x) // 4) for x in items)
        with LOCK:
            STATS["requests"] += 1
            STATS["prompts"].append(json.dumps(inp)[:64])
        data = [{"object": "embedding", "index": i, "embedding": [0.5, -0.25, 0.125, float(i)]}
                for i in range(len(items))]
        self._json(200, {"object": "list", "data": data, "model": body.get("model", "embed"),
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    def _serve(self, body, chat, model, prompt, max_tokens):
        if model == "fail":
            self._json(500, {"error": {"message": "engine failure", "type": "server_error"}})
            return
        if model == "bad-request":
            self._json(400, {"error": {"message": "bad sampling parameters",
                                       "type": "invalid_request_error"}})
            return
        if model == "hang":
            while True:  # until the peer closes
                time.sleep(0.05)
                self._raise_if_peer_closed()
        delay = (ARGS.slow_ms if model == "slow" else ARGS.token_ms) / 1000.0
        prompt_tokens = 1 if model == "short-usage" else max(1, len(prompt) // 4)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                 "total_tokens": prompt_tokens + max_tokens}
        obj = "chat.completion" if chat else "text_completion"
        if not body.get("stream"):
            time.sleep(delay * max_tokens)
            text = "".join(f"t{i} " for i in range(max_tokens))
            choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                       "finish_reason": "length"} if chat else
                      {"index": 0, "text": text, "finish_reason": "length"})
            self._json(200, {"id": "cmpl-1", "object": obj, "model": model,
                             "choices": [choice], "usage": usage})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        if model == "ping-held":  # the header and a comment in one write, then held
            ping = b": ping\n\n"
            self._headers_buffer.append(b"\r\n" + b"%x\r\n%s\r\n" % (len(ping), ping))
            self.flush_headers()
            while not RELEASED.wait(0.05):
                self._raise_if_peer_closed()
        else:
            self.end_headers()
        # "burst": every token's chunk, the usage and [DONE] in one write, as
        # an engine that emits several tokens a step (or a proxy) sends them.
        burst = bytearray() if model == "burst" else None
        for i in range(max_tokens):
            if delay > 0 and burst is None:
                time.sleep(delay)
            piece = f"t{i} "
            choice = ({"index": 0, "delta": {"content": piece}, "finish_reason": None} if chat
                      else {"index": 0, "text": piece, "finish_reason": None})
            chunk = {"id": "cmpl-1", "object": obj + ".chunk", "model": model, "choices": [choice]}
            self._chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n", burst)
            while model == "held" and not RELEASED.wait(0.05):
                self._raise_if_peer_closed()
            if model == "drop" and i == 1:
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
                return
        if (body.get("stream_options") or {}).get("include_usage"):
            self._chunk(b"data: " + json.dumps({"id": "cmpl-1", "object": obj + ".chunk",
                                                "model": model, "choices": [],
                                                "usage": usage}).encode() + b"\n\n", burst)
        self._release()
        # [DONE] and the last chunk in one write: a client that has read
        # [DONE] has the end of the body too (a connection it pools then is
        # ready for the next call, whatever the scheduling of this thread).
        done = b"data: [DONE]\n\n"
        self.wfile.write(bytes(burst or b"") + b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
        self.wfile.flush()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--token-ms", type=float, default=1.0, help="delay before each token")
    p.add_argument("--slow-ms", type=float, default=200.0, help="the same for model 'slow'")
    p.add_argument("--keep-alive-s", type=float, default=None,
                   help="close a connection idle this long")
    p.add_argument("--unhealthy-file", default=None,
                   help="GET /health answers 503 while this file exists")
    p.add_argument("--engine-slots", type=int, default=0,
                   help="run at most this many calls at once, queue the rest; serve /metrics")
    p.add_argument("--engine-priority", default="off",
                   choices=("off", "lower_first", "higher_first"),
                   help="order the engine's waiting calls by the body's priority")
    p.add_argument("--prefix-cache-blocks", type=int, default=0,
                   help="model a prefix cache of this many 64-byte blocks; serve /metrics")
    args = p.parse_args()
    global ENGINE, PREFIX_CACHE
    if args.engine_slots > 0:
        ENGINE = Engine(args.engine_slots, args.engine_priority)
    if args.prefix_cache_blocks > 0:
        PREFIX_CACHE = PrefixCache(args.prefix_cache_blocks)
    ARGS.unhealthy_file = args.unhealthy_file
    if args.keep_alive_s is not None:
        Handler.timeout = args.keep_alive_s
    ARGS.token_ms, ARGS.slow_ms = args.token_ms, args.slow_ms
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 1024
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"PORT {srv.server_address[1]}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
