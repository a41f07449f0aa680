"""examples/torch_worker.py, a PyTorch decoder as a worker, end to end: a real
fairschedd, the worker process on a tiny model, clients reading streams.

Its tokens are the argmax of a random model, so the checks are on counts,
order and loss: every request gets exactly its max_output_tokens, in
contiguous chunks, each a token id of the model's vocabulary, and the final
usage equals what was streamed; a cancelled request ends CANCELLED with
what it produced; more requests than the engine's KV slots all complete.

$FAIRSCHED_TORCH_DEVICE picks the device (default cpu; the GPU kit runs it
with cuda).
"""

# fairsched-test-requires: torch

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from conftest import BIN, REPO, Daemon, Process, python_env
from fairsched import Client, Status, prefix_block_hashes

sys.path.insert(0, str(REPO / "examples"))
from torch_engine.engine import Engine  # noqa: E402
from torch_engine.model import ModelConfig  # noqa: E402

WORKER = REPO / "examples" / "torch_worker.py"
DEVICE = os.environ.get("FAIRSCHED_TORCH_DEVICE", "cpu")
VOCAB = 512
TINY = ["--layers", "2", "--width", "64", "--heads", "4", "--vocab", str(VOCAB),
        "--max-context", "4608", "--threads", "1", "--device", DEVICE]


def start_worker(daemon: Daemon, *extra: str) -> Process:
    p = Process(
        [sys.executable, str(WORKER), "--socket", daemon.socket, "--endpoint", "chat", *TINY,
         *extra],
        daemon.dir / f"torch-worker.{len(daemon.children)}.log",
        python_env(),
    )
    daemon.children.append(p)
    return p


class Streams:
    """Every request's chunks, checked for order as they arrive, and its final completion."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.tokens: dict[int, list[int]] = {}
        self.final: dict[int, Any] = {}

    def submit(self, tenant: Any, prompt: list[int], n: int) -> int:
        rid = self.client.submit(tenant, "chat", prompt, max_output_tokens=n, stream=True)
        self.tokens[rid] = []
        return rid

    def pump(self, timeout: float = 0.5) -> None:
        self.client.wait(timeout)
        for c in self.client.poll():
            if c.partial:
                got = self.tokens[c.request_id]
                assert c.first_token == len(got), (
                    f"request {c.request_id}: chunk at {c.first_token} after {len(got)} tokens")
                got.extend(c.tokens)
            else:
                assert c.request_id not in self.final, "two final completions"
                self.final[c.request_id] = c

    def until(self, pred: Any, timeout: float, what: str, worker: Process) -> None:
        end = time.monotonic() + timeout
        while not pred():
            assert worker.alive(), f"the torch worker exited: {worker.output()}"
            assert time.monotonic() < end, f"timed out after {timeout} s waiting for {what}"
            self.pump()


def test_every_request_streams_its_tokens_in_order_and_more_than_the_slots_complete(
        daemon: Daemon) -> None:
    worker = start_worker(daemon, "--max-sequences", "4")
    with Client.connect(daemon.socket) as client:
        s = Streams(client)
        a, b = client.open_tenant("acme"), client.open_tenant("beta")
        shapes = [(list(range(1 + i % 5, 9 + i)), 3 + 2 * i) for i in range(10)]
        ids = [s.submit(a if i % 2 else b, prompt, n) for i, (prompt, n) in enumerate(shapes)]
        ids.append(s.submit(a, [], 6))  # an empty prompt
        s.until(lambda: len(s.final) == len(ids), 120, "every request", worker)
        wants = [n for _, n in shapes] + [6]
        for rid, n in zip(ids, wants):
            f = s.final[rid]
            assert f.status == Status.OK, f
            assert len(s.tokens[rid]) == n
            assert f.output_tokens == n
            assert all(0 <= t < VOCAB for t in s.tokens[rid])
    assert worker.alive()


def test_a_cancelled_request_ends_cancelled_and_the_worker_serves_on(daemon: Daemon) -> None:
    worker = start_worker(daemon)
    with Client.connect(daemon.socket) as client:
        s = Streams(client)
        t = client.open_tenant("acme")
        long = s.submit(t, [1, 2, 3], 4000)
        s.until(lambda: len(s.tokens[long]) >= 3, 60, "the first tokens", worker)
        client.cancel(long)
        s.until(lambda: long in s.final, 30, "the cancelled request's completion", worker)
        f = s.final[long]
        assert f.status == Status.CANCELLED, f
        assert len(s.tokens[long]) <= f.output_tokens < 4000
        after = s.submit(t, [7, 7], 5)
        s.until(lambda: after in s.final, 30, "a request after the cancel", worker)
        assert s.final[after].status == Status.OK
        assert len(s.tokens[after]) == 5
    assert worker.alive()


def test_bench_runs_the_loop_alone_and_through_the_daemon_with_the_same_tokens(
        tmpdir_short: Any) -> None:
    out = tmpdir_short / "bench.json"
    r = subprocess.run(
        [sys.executable, str(WORKER), "--bench", "--fairschedd", str(BIN / "fairschedd"),
         "--requests", "6", "--prompt-len", "8", "--output-len", "12", "--max-sequences", "4",
         "--json", str(out), *TINY],
        capture_output=True, text=True, timeout=240, env=python_env(),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(out.read_text())
    assert res["standalone"]["tokens"] == 6 * 12
    assert res["through_fairsched"]["tokens"] == 6 * 12
    assert res["client"]["tokens"] == 6 * 12 and res["client"]["bad"] == 0
    assert res["standalone"]["tokens_per_s"] > 0 and res["through_fairsched"]["tokens_per_s"] > 0
    assert len(res["standalone"]["rounds"]) == 1 and len(res["through_fairsched"]["rounds"]) == 1
    assert res["through_fairsched"]["fairsched_us_per_step"] > 0
    assert "added_us_per_step" in res


def _generate(engine: Engine, prompts: list[list[int]], n: int) -> tuple[list[list[int]], list[int]]:
    """Each prompt run alone to its end: its tokens, and the positions each prefill computed."""
    out, computed = [], []
    for i, p in enumerate(prompts):
        engine.add(i + 1, p, len(p), n, prefix_block_hashes(p))
        toks: list[int] = []
        done = 0
        while engine.busy():
            res = engine.step()
            toks += [t for _, t in res.tokens]
            done += res.prefill_tokens
        out.append(toks)
        computed.append(done)
    return out, computed


def test_a_cached_prefix_is_not_recomputed_and_changes_no_token() -> None:
    cfg = ModelConfig(layers=2, width=64, heads=4, vocab=VOCAB, max_context=256,
                      max_sequences=4, kv_tokens=1024, device=DEVICE)
    shared = [(7 * j) % 500 for j in range(96)]  # six blocks of 16
    prompts = [shared + [1, 2, 3, 4, 5], shared + [9, 8, 7], shared[:40] + [5] * 30]
    plain, plain_computed = _generate(Engine(cfg), prompts, 6)
    cached_engine = Engine(cfg, cache_blocks=64)
    cached, computed = _generate(cached_engine, prompts, 6)
    # The same keys and values, so the same tokens (on CPU bit for bit; a
    # GPU's kernels may round a suffix-only prefill differently).
    if DEVICE == "cpu":
        assert cached == plain
    assert plain_computed == [101, 99, 70]
    # The second reuses all six shared blocks; the third the first two (32
    # of its 40 shared positions), its own suffix computed.
    assert computed == [101, 3, 70 - 32]
    # A cache of two blocks keeps a prompt's leading blocks, not its last.
    small = Engine(cfg, cache_blocks=2)
    _, small_computed = _generate(small, prompts[:2], 6)
    assert small_computed == [101, 99 - 32]


@pytest.mark.prefix_routing
def test_the_worker_reports_its_cache_and_the_daemon_routes_by_it(daemon: Daemon,
                                                                   tmpdir_short: Any) -> None:
    stats = tmpdir_short / "worker-stats.json"
    worker = start_worker(daemon, "--prefix-cache-blocks", "64", "--stats-json", str(stats))
    shared = [(11 * j) % 500 for j in range(64)]
    with Client.connect(daemon.socket) as client:
        s = Streams(client)
        t = client.open_tenant("acme")
        for i in range(3):
            rid = s.submit(t, shared + [100 + i] * 10, 4)
            s.until(lambda: rid in s.final, 60, f"request {i}", worker)
            assert s.final[rid].status == Status.OK
    rows = [w for w in daemon.status()["workers"] if w["name"] == "torch-worker"]
    cache = rows[0]["prefix_cache"]
    assert cache["source"] == "events", cache
    assert cache["hit_blocks"] == 2 * 4, cache  # the 2nd and 3rd found the four shared blocks
    assert worker.stop() == 0, worker.output()  # SIGTERM: it writes its counters and exits
    summary = json.loads(stats.read_text())
    assert summary["cached_tokens"] == 2 * 64
    assert summary["prefill_tokens"] == 3 * 74 - 2 * 64


def test_bench_routing_serves_the_workload_both_ways_and_reports_each(tmpdir_short: Any) -> None:
    out = tmpdir_short / "routing.json"
    r = subprocess.run(
        [sys.executable, str(WORKER), "--bench-routing", "--fairschedd", str(BIN / "fairschedd"),
         "--families", "4", "--per-family", "3", "--prefix-len", "64", "--prompt-len", "8",
         "--output-len", "4", "--max-sequences", "4", "--json", str(out), *TINY],
        capture_output=True, text=True, timeout=240, env=python_env(),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(out.read_text())
    assert res["workload"]["distinct_shared_blocks"] == 16
    assert res["workload"]["cache_blocks_per_worker"] == 8
    for routing in ("roomiest", "prefix"):
        run = res[routing]
        assert run["requests"] == 12 and run["bad"] == 0
        # Every prompt position was either computed or taken from a cache.
        assert run["prefill_tokens"] + run["cached_tokens"] == 12 * (64 + 8)
        assert sum(run["requests_per_worker"]) == 12
    assert res["roomiest"]["hit_blocks"] == 0  # placed by room: no prefix is looked at
    assert res["aims"][0]["at_least"] == 1.3 and len(res["ratio_per_round"]) == 1
