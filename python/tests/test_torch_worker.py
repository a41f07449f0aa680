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

from conftest import BIN, REPO, Daemon, Process, python_env
from fairsched import Client, Status

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
