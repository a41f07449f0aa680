"""The blocking Client against a real daemon: submit/poll/wait, streaming,
several threads (each with its own client, and sharing one), submit_and_wait,
the library's retry loop, and the completion descriptor with select()."""

from __future__ import annotations

import random
import select
import threading
import time

from conftest import Daemon, reference_tokens, seed
from fairsched import Client, Completion, RetryPolicy, Status, TimedOut


def collect(client: Client, ids: set[int], timeout: float) -> tuple[dict[int, list[int]], dict[int, Completion]]:
    """Polls until every id in `ids` has its final completion; chunks' tokens by id."""
    tokens: dict[int, list[int]] = {i: [] for i in ids}
    finals: dict[int, Completion] = {}
    deadline = time.monotonic() + timeout
    while len(finals) < len(ids):
        left = deadline - time.monotonic()
        assert left > 0, f"{len(ids) - len(finals)} requests without a final completion"
        client.wait(min(left, 1.0))
        for c in client.poll():
            assert c.request_id in ids, c
            assert c.request_id not in finals, f"a completion after the final one: {c}"
            if c.partial:
                assert c.first_token == len(tokens[c.request_id])
                tokens[c.request_id].extend(c.tokens)
            else:
                finals[c.request_id] = c
    return tokens, finals


def test_streamed_requests_arrive_in_order_with_the_reference_tokens(daemon: Daemon) -> None:
    daemon.cpp_worker()
    rng = random.Random(seed())
    with Client.connect(daemon.socket, name="py-blocking") as client:
        t = client.open_tenant("acme")
        assert t.name == "acme" and client.open_tenant("acme") == t
        want = {}
        for i in range(40):
            prompt = [rng.randrange(2**32) for _ in range(rng.randrange(1, 16))]
            n = rng.randrange(1, 64)
            rid = client.submit(t, "chat", prompt, max_output_tokens=n, stream=True, tag=1000 + i)
            want[rid] = (prompt, n, 1000 + i)
        tokens, finals = collect(client, set(want), 30)
        for rid, (prompt, n, tag) in want.items():
            assert finals[rid].status == Status.OK and finals[rid].tag == tag
            assert finals[rid].output_tokens == n
            assert tokens[rid] == reference_tokens(prompt, n)
            assert finals[rid].time_to_first_token > 0
        assert client.poll() == []


def test_threads_each_with_a_client_and_threads_sharing_one(daemon: Daemon) -> None:
    daemon.cpp_worker()
    base = seed()
    errors: list[BaseException] = []
    shared = Client.connect(daemon.socket, name="py-shared")
    shared_tenant = shared.open_tenant("shared")

    def own_client(k: int) -> None:
        rng = random.Random(base + k)
        with Client.connect(daemon.socket, name=f"py-thread-{k}") as c:
            t = c.open_tenant(f"thread{k}")
            want = {}
            for _ in range(30):
                prompt = [rng.randrange(1000) for _ in range(rng.randrange(1, 8))]
                n = rng.randrange(1, 20)
                want[c.submit(t, "chat", prompt, max_output_tokens=n, stream=True)] = (prompt, n)
            tokens, finals = collect(c, set(want), 60)
            for rid, (prompt, n) in want.items():
                assert finals[rid].status == Status.OK
                assert tokens[rid] == reference_tokens(prompt, n)

    def sharing(k: int) -> None:
        for i in range(30):
            c = shared.submit_and_wait(shared_tenant, "chat", [k, i], max_output_tokens=5,
                                       wait_timeout=30, tag=k * 100 + i)
            assert (c.status, c.output_tokens, c.tag) == (Status.OK, 5, k * 100 + i)

    def guarded(fn, k: int) -> None:  # type: ignore[no-untyped-def]
        try:
            fn(k)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(own_client, k)) for k in range(4)]
    threads += [threading.Thread(target=guarded, args=(sharing, k)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(90)
        assert not th.is_alive(), "a client thread did not finish in 90 s"
    shared.close()
    assert not errors, errors


def test_wait_returns_false_after_its_timeout_when_nothing_comes(daemon: Daemon) -> None:
    with Client.connect(daemon.socket) as client:
        start = time.monotonic()
        assert client.wait(0.2) is False
        assert 0.15 < time.monotonic() - start < 5


def test_submit_and_wait_times_out_and_the_request_stays_with_the_daemon(daemon: Daemon) -> None:
    with Client.connect(daemon.socket) as client:
        t = client.open_tenant("acme")
        try:
            client.submit_and_wait(t, "chat", [1], max_output_tokens=1, wait_timeout=0.1)
        except TimedOut as e:
            assert e.name == "TIMED_OUT"
        else:
            raise AssertionError("no worker serves chat: submit_and_wait must time out")


def test_the_completion_descriptor_works_with_select(daemon: Daemon) -> None:
    with Client.connect(daemon.socket) as client:
        t = client.open_tenant("acme")
        fd = client.completion_fd()
        assert client.prepare_to_block() is True  # nothing yet
        rid = client.submit(t, "embed", [1, 2, 3], max_output_tokens=0, tag=9)
        got: list[Completion] = []
        deadline = time.monotonic() + 10
        while not got:
            assert time.monotonic() < deadline, "no completion through the descriptor"
            if client.prepare_to_block():
                select.select([fd], [], [], 1.0)
            got = client.poll()
        assert [(c.request_id, c.tag, c.status) for c in got] == [(rid, 9, Status.OK)]
        assert got[0].service > 0


def test_submit_with_retry_is_the_librarys_loop(daemon: Daemon) -> None:
    with Client.connect(daemon.socket) as client:
        t = client.open_tenant("limited")  # 2 requests/second on embed
        policy = RetryPolicy(max_attempts=10, base_backoff=0.01, max_backoff=0.05)
        outcomes = [client.submit_with_retry(t, "embed", [1], max_output_tokens=0, policy=policy)
                    for _ in range(4)]
        assert all(o.completion.status == Status.OK for o in outcomes)
        assert sum(o.attempts for o in outcomes) > 4
        assert all(o.stop is None for o in outcomes)  # not reported by the C ABI

        one = client.submit_with_retry(t, "embed", [1], max_output_tokens=0,
                                       policy=RetryPolicy(max_attempts=1))
        one_more = client.submit_with_retry(t, "embed", [1], max_output_tokens=0,
                                            policy=RetryPolicy(max_attempts=1))
        statuses = {one.completion.status, one_more.completion.status}
        assert Status.RATE_LIMITED in statuses  # 2 per second, one attempt each: a third fails
        limited = one if one.completion.status == Status.RATE_LIMITED else one_more
        assert limited.attempts == 1 and limited.completion.retry_after > 0

