"""AsyncClient against a real daemon: many tasks on one client, streaming
order against the reference tokens, cancel (queued, running, and by
cancelling the awaiting task), retries, and an idle reader that costs no CPU."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from conftest import Daemon, reference_tokens, run, seed
from fairsched import (
    AsyncClient,
    AsyncWorker,
    NotConnected,
    RetryPolicy,
    RetryStop,
    RingFull,
    Status,
    WorkKind,
)


def test_many_tasks_share_one_client_and_every_stream_is_the_reference(daemon: Daemon) -> None:
    daemon.cpp_worker()
    rng = random.Random(seed())

    async def main() -> None:
        client = await AsyncClient.connect(daemon.socket, name="py-many")
        tenants = [await client.open_tenant(f"tenant{i}") for i in range(4)]

        async def one(i: int) -> None:
            prompt = [rng.randrange(2**32) for _ in range(rng.randrange(0, 24))]
            n = rng.randrange(1, 48)
            req = client.submit(tenants[i % 4], "chat", prompt, max_output_tokens=n,
                                stream=True, tag=i)
            got: list[int] = []
            async for chunk in req:
                assert chunk.partial and chunk.tag == i and chunk.status == Status.OK
                assert chunk.first_token == len(got)
                assert chunk.emitted > 0
                got.extend(chunk.tokens)
            final = await req
            assert not final.partial and final.tag == i
            assert final.status == Status.OK, final
            assert final.output_tokens == n
            assert final.input_tokens == len(prompt)
            assert got == reference_tokens(prompt, n)

        await asyncio.gather(*(one(i) for i in range(300)))
        assert client.outstanding == 0
        assert client.unclaimed == 0
        client.close()

    run(main(), 90)


def test_requests_without_stream_get_only_their_final_completion(daemon: Daemon) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(daemon.socket) as client:
            t = await client.open_tenant("acme")
            reqs = [client.submit(t, "embed", [i, i + 1], max_output_tokens=0, tag=i)
                    for i in range(50)]
            chunks = [c for r in reqs async for c in r]
            finals = await asyncio.gather(*reqs)
            assert chunks == []
            assert [f.tag for f in finals] == list(range(50))
            assert all(f.status == Status.OK for f in finals)
            assert len({f.request_id for f in finals}) == 50

    run(main(), 30)


def test_cancel_of_a_queued_request_ends_it_cancelled_at_once(daemon: Daemon) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(daemon.socket) as client:
            t = await client.open_tenant("acme")
            # No worker serves chat: the request waits in its queue.
            req = client.submit(t, "chat", [1, 2, 3], max_output_tokens=8, stream=True)
            assert req.cancel()
            final = await req
            assert final.status == Status.CANCELLED and final.output_tokens == 0
            assert [c async for c in req] == []
            assert not req.cancel()  # done: nothing to send

    run(main(), 20)


def test_cancel_of_a_running_request_keeps_the_tokens_streamed_so_far(daemon: Daemon) -> None:
    # 20 ms per step: a 2000-token request would run for 40 s.
    daemon.python_engine("--step-us", "20000")

    async def main() -> None:
        async with await AsyncClient.connect(daemon.socket) as client:
            t = await client.open_tenant("acme")
            prompt = [7, 8, 9]
            req = client.submit(t, "chat", prompt, max_output_tokens=2000, stream=True)
            got: list[int] = []
            async for chunk in req:
                got.extend(chunk.tokens)
                if len(got) >= 3:
                    assert req.cancel()
            final = await req
            assert final.status == Status.CANCELLED
            assert final.output_tokens == len(got) >= 3
            assert got == reference_tokens(prompt, len(got))

    run(main(), 30)


def test_cancelling_the_awaiting_task_cancels_the_request(daemon: Daemon) -> None:
    daemon.python_engine("--step-us", "20000")

    async def main() -> None:
        async with await AsyncClient.connect(daemon.socket) as client:
            t = await client.open_tenant("acme")
            # Running: a task streaming it is cancelled after the first chunk.
            running = client.submit(t, "chat", [5], max_output_tokens=2000, stream=True)
            first = asyncio.Event()
            seen: list[int] = []

            async def consume() -> None:
                async for chunk in running:
                    seen.extend(chunk.tokens)
                    first.set()

            task = asyncio.create_task(consume())
            await first.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            final = await running.completion()
            assert final.status == Status.CANCELLED
            assert final.output_tokens >= len(seen) >= 1

            # A task awaiting the completion of a running request.
            blocker = client.submit(t, "chat", [1], max_output_tokens=2000)
            waiting = asyncio.create_task(blocker.completion())
            await asyncio.sleep(0.1)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert (await blocker).status == Status.CANCELLED

            # asyncio.wait_for's timeout cancels the awaiting task too.
            slow = client.submit(t, "chat", [2], max_output_tokens=2000)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(slow.completion(), 0.1)
            assert (await slow).status == Status.CANCELLED

            # shield: the task goes, the request stays.
            kept = client.submit(t, "chat", [3], max_output_tokens=3)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(kept.completion()), 0.001)
            assert (await kept).status == Status.OK

    run(main(), 40)


def test_an_idle_client_with_outstanding_requests_does_not_spin(daemon: Daemon) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(daemon.socket) as client:
            t = await client.open_tenant("acme")
            req = client.submit(t, "chat", [1], max_output_tokens=4)  # no worker: it waits
            cpu = time.process_time()
            await asyncio.sleep(1.0)
            used = time.process_time() - cpu
            assert used < 0.2, f"{used:.3f} s of CPU in 1 s of waiting: the reader spins"
            req.cancel()
            assert (await req).status == Status.CANCELLED

    run(main(), 20)


def test_submit_with_retry_waits_out_rate_limits_then_succeeds(daemon: Daemon) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(daemon.socket) as client:
            t = await client.open_tenant("limited")  # 2 requests/second on embed
            policy = RetryPolicy(max_attempts=10, base_backoff=0.01, max_backoff=0.05)
            outcomes = await asyncio.gather(*(
                client.submit_with_retry(t, "embed", [1, 2], max_output_tokens=0, policy=policy)
                for _ in range(5)))
            assert all(o.completion.status == Status.OK for o in outcomes), outcomes
            assert all(o.stop == RetryStop.FINAL for o in outcomes)
            assert sum(o.attempts for o in outcomes) > 5  # some were rate limited first
            retried = [o for o in outcomes if o.attempts > 1]
            assert all(o.slept is not None and o.slept > 0 for o in retried)

    run(main(), 30)


def test_submit_with_retry_stops_on_a_retry_after_above_the_policys_bound(daemon: Daemon) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(daemon.socket) as client:
            t = await client.open_tenant("daily")  # 1 request/day on embed
            first = await client.submit_with_retry(t, "embed", [1], max_output_tokens=0)
            assert first.completion.status == Status.OK
            sleeps: list[float] = []

            async def no_sleep(d: float) -> None:
                sleeps.append(d)

            o = await client.submit_with_retry(t, "embed", [1], max_output_tokens=0,
                                               sleep=no_sleep)
            assert o.completion.status == Status.RATE_LIMITED
            assert o.stop == RetryStop.RETRY_AFTER_TOO_LONG and o.attempts == 1
            assert o.completion.retry_after > 3600
            assert o.completion.http_status() == 429
            headers = dict(o.completion.http_headers())
            assert int(headers["retry-after"]) > 3600
            assert sleeps == []

    run(main(), 20)


def test_submit_with_retry_gives_up_after_max_attempts(daemon: Daemon) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(daemon.socket) as client:
            t = await client.open_tenant("limited")
            for _ in range(2):  # the two requests of this second
                await client.submit(t, "embed", [1], max_output_tokens=0)
            sleeps: list[float] = []

            async def no_sleep(d: float) -> None:
                sleeps.append(d)

            o = await client.submit_with_retry(
                t, "embed", [1], max_output_tokens=0, sleep=no_sleep,
                policy=RetryPolicy(max_attempts=3, base_backoff=0.001, max_backoff=0.001))
            assert o.completion.status == Status.RATE_LIMITED
            assert (o.stop, o.attempts, len(sleeps)) == (RetryStop.MAX_ATTEMPTS, 3, 2)
            assert o.completion.retry_after > 0 and all(s > 0 for s in sleeps)

    run(main(), 20)


def test_closing_the_client_fails_outstanding_requests_with_not_connected(daemon: Daemon) -> None:
    async def main() -> None:
        client = await AsyncClient.connect(daemon.socket)
        t = await client.open_tenant("acme")
        req = client.submit(t, "chat", [1], max_output_tokens=4, stream=True)
        client.close()
        with pytest.raises(NotConnected):
            await req
        with pytest.raises(NotConnected):
            async for _ in req:
                pass
        with pytest.raises(NotConnected):
            client.submit(t, "chat", [1], max_output_tokens=4)
        client.close()  # idempotent

    run(main(), 20)


def test_connect_is_an_async_context_manager_and_aclose_closes(daemon: Daemon) -> None:
    async def main() -> None:
        async with AsyncClient.connect(daemon.socket, name="py-with") as client:
            assert isinstance(client, AsyncClient) and client.connected
            t = await client.open_tenant("acme")
            assert (await client.submit(t, "embed", [1], max_output_tokens=0)).ok
        assert not client.connected
        with pytest.raises(NotConnected):
            client.submit(t, "embed", [1], max_output_tokens=0)

        async with AsyncWorker.connect(daemon.socket, "chat", name="py-with") as worker:
            assert isinstance(worker, AsyncWorker) and worker.connected
            assert await worker.next_items(0.01) == []
        with pytest.raises(NotConnected):
            await worker.next_items(0.01)

        # Awaited, as before; aclose() closes.
        client = await AsyncClient.connect(daemon.socket)
        worker = await AsyncWorker.connect(daemon.socket, "chat")
        await client.aclose()
        await worker.aclose()
        assert not client.connected and not worker.connected
        await client.aclose()  # idempotent

    run(main(), 30)


def test_asubmit_waits_for_room_instead_of_raising_ring_full(daemon: Daemon) -> None:
    async def main() -> None:
        async with AsyncClient.connect(daemon.socket) as client:
            t = await client.open_tenant("acme")
            # More in one loop turn than the lanes hold (8 x 256 slots): none
            # is refused, whether or not the daemon kept up.
            n = 3000
            submits = [client.asubmit(t, "embed", [i], max_output_tokens=0, tag=i)
                       for i in range(n)]
            requests = await asyncio.gather(*submits)
            finals = await asyncio.gather(*requests)
            assert [f.tag for f in finals] == list(range(n))
            assert all(f.status == Status.OK for f in finals)
            print(f"asubmit waited for room {client.ring_full_waits} times")

    run(main(), 120)


def test_asubmit_retries_a_full_ring_and_gives_up_at_the_deadline(daemon: Daemon) -> None:
    async def main() -> None:
        async with AsyncClient.connect(daemon.socket) as client:
            t = await client.open_tenant("acme")
            real_submit = client.submit
            refusals = [3]

            def full_three_times(*args: object, **kwargs: object) -> object:
                if refusals[0] > 0:
                    refusals[0] -= 1
                    raise RingFull("the lanes are full (the test says)")
                return real_submit(*args, **kwargs)  # type: ignore[arg-type]

            client.submit = full_three_times  # type: ignore[method-assign]
            req = await client.asubmit(t, "embed", [1], max_output_tokens=0, tag=5)
            assert (await req).status == Status.OK and req.tag == 5
            assert client.ring_full_waits == 3

            def always_full(*args: object, **kwargs: object) -> object:
                raise RingFull("the lanes are full (the test says)")

            client.submit = always_full  # type: ignore[method-assign]
            with pytest.raises(RingFull):
                await client.asubmit(t, "embed", [1], max_output_tokens=0, timeout=0.05)
            with pytest.raises(RingFull):
                await client.asubmit(t, "embed", [1], max_output_tokens=0,
                                     deadline=time.monotonic())
            client.submit = real_submit  # type: ignore[method-assign]

    run(main(), 30)


def test_a_stream_nobody_reads_ends_slow_consumer_past_the_clients_buffer(daemon: Daemon) -> None:
    async def main() -> None:
        async with AsyncWorker.connect(daemon.socket, "chat") as worker, \
                AsyncClient.connect(daemon.socket, stream_buffer_tokens=16) as client:
            assert client.stream_buffer_tokens == 16
            worker.set_capacity(2, 100_000)
            t = await client.open_tenant("acme")
            req = client.submit(t, "chat", [1], max_output_tokens=1000, stream=True)
            [item] = await worker.next_items(10)
            emitted = list(range(100, 140))
            for i in range(0, 40, 5):  # nobody reads: it piles up in the client
                worker.emit(item.id, emitted[i:i + 5])
            aborted = await worker.next_items(10)
            assert [(i.kind, i.id) for i in aborted] == [(WorkKind.ABORT, item.id)]
            worker.finish(item.id, Status.CANCELLED, 40)
            final = await asyncio.wait_for(req.completion(), 10)
            assert final.status == Status.SLOW_CONSUMER
            assert final.output_tokens == 40
            kept = [tok for chunk in [c async for c in req] for tok in chunk.tokens]
            assert len(kept) <= 16 and kept == emitted[:len(kept)]

            # A stream that is read keeps going past the bound.
            req = client.submit(t, "chat", [2], max_output_tokens=1000, stream=True)
            [item] = await worker.next_items(10)
            got: list[int] = []
            for i in range(0, 40, 5):
                worker.emit(item.id, emitted[i:i + 5])
                while len(got) < i + 5:
                    got += (await asyncio.wait_for(req.__anext__(), 10)).tokens
            worker.finish(item.id, Status.OK, 40)
            assert (await req).status == Status.OK and got == emitted

    run(main(), 30)
