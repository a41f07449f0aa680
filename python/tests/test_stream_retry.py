"""AsyncClient.stream_with_retry: the submission of a stream is retried as
submit_with_retry retries, until the first chunk, and never after."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Optional

from conftest import Daemon, reference_tokens, run
from fairsched import (
    AsyncClient,
    Completion,
    RetryBudget,
    RetryingStream,
    RetryPolicy,
    RetryStop,
    RingFull,
    Status,
    TimedOut,
)
from fairsched.aio import Request, _Retries

FAST = RetryPolicy(max_attempts=5, base_backoff=0.001, max_backoff=0.002)


def test_a_rate_limited_stream_is_retried_then_streams_every_token(tmpdir_short: Path) -> None:
    d = Daemon(tmpdir_short, extra_config='[tenants.burst]\n[tenants.burst.limits]\n'
                                          'chat = ["1 request/second"]\n')
    d.start()
    d.cpp_worker()

    async def main() -> None:
        async with AsyncClient.connect(d.socket) as client:
            t = await client.open_tenant("burst")
            # The tenant's one request of this second.
            assert (await client.submit(t, "chat", [5], max_output_tokens=1)).ok
            prompt = [3, 1, 4]
            stream = client.stream_with_retry(t, "chat", prompt, max_output_tokens=40,
                                              policy=FAST, tag=9)
            assert stream.attempts == 0 and stream.request is None  # nothing sent yet
            got: list[int] = []
            async for chunk in stream:
                assert chunk.partial and chunk.tag == 9 and chunk.first_token == len(got)
                got.extend(chunk.tokens)
            outcome = await stream
            assert outcome.attempts >= 2, outcome  # RATE_LIMITED first, then streamed
            assert outcome.stop == RetryStop.FINAL and outcome.slept is not None
            assert outcome.slept > 0
            assert outcome.completion.status == Status.OK
            assert outcome.completion.output_tokens == 40
            assert got == reference_tokens(prompt, 40)
            assert stream.request is not None and stream.request.id == outcome.completion.request_id
            assert client.outstanding == 0

    try:
        run(main(), 30)
    finally:
        d.stop()


def test_a_stream_that_never_gets_in_yields_nothing_and_says_why(daemon: Daemon) -> None:
    daemon.cpp_worker()

    async def main() -> None:
        async with AsyncClient.connect(daemon.socket) as client:
            t = await client.open_tenant("daily")  # chat: 1 request/day
            first = client.stream_with_retry(t, "chat", [1], max_output_tokens=3, policy=FAST)
            assert [tok async for c in first for tok in c.tokens] == reference_tokens([1], 3)
            assert (await first).completion.ok
            second = client.stream_with_retry(t, "chat", [1], max_output_tokens=3, policy=FAST)
            assert [c async for c in second] == []
            outcome = await second
            assert outcome.completion.status == Status.RATE_LIMITED
            assert outcome.stop == RetryStop.RETRY_AFTER_TOO_LONG and outcome.attempts == 1
            assert "done RATE_LIMITED" in repr(second)

    run(main(), 30)


# -- the loop's rules, against requests fed by hand ----------------------------


class _FakeClient:
    """What Request and RetryingStream use of an AsyncClient; submit() hands
    out Requests that the test completes itself."""

    def __init__(self, ring_full: int = 0) -> None:
        self._loop = asyncio.get_running_loop()
        self.stream_buffer_tokens: Optional[int] = None
        self.submitted: list[Request] = []
        self.cancelled: list[int] = []
        self.ring_full = ring_full
        self.on_submit: Any = None

    def submit(self, tenant: Any, endpoint: str, prompt: Any, **kw: Any) -> Request:
        assert kw["stream"] is True
        if self.ring_full:
            self.ring_full -= 1
            raise RingFull("submission ring full")
        req = Request(self, len(self.submitted) + 1, kw["tag"], True)  # type: ignore[arg-type]
        self.submitted.append(req)
        if self.on_submit is not None:
            self._loop.call_soon(self.on_submit, req)
        return req

    def _send_cancel(self, req: Request) -> bool:
        self.cancelled.append(req.id)
        return True


def _stream(client: _FakeClient, policy: RetryPolicy = FAST) -> RetryingStream:
    retries = _Retries(policy, RetryBudget(), None, None, start=False)
    return RetryingStream(client, retries,  # type: ignore[arg-type]
                          dict(tenant=None, endpoint="chat", prompt=[1], max_output_tokens=8,
                               priority=0, params=None, prompt_token_count=None, stream=True,
                               tag=3),
                          asyncio.sleep)


def _chunk(req: Request, first: int, tokens: list[int]) -> Completion:
    return Completion(req.id, 3, Status.OK, partial=True, first_token=first, tokens=tokens)


def test_after_a_token_was_delivered_the_stream_is_never_submitted_again() -> None:
    async def main() -> None:
        client = _FakeClient()

        def feed(req: Request) -> None:
            if req.id == 1:  # no token: retryable, so tried again
                req._on_final(Completion(req.id, 3, Status.QUEUE_FULL))
            else:  # tokens, then a retryable end: final, never retried
                req._on_chunk(_chunk(req, 0, [7, 8]))
                req._on_final(Completion(req.id, 3, Status.QUEUE_FULL, output_tokens=2))

        client.on_submit = feed
        stream = _stream(client)
        chunks = [c async for c in stream]
        outcome = await stream
        assert [c.tokens for c in chunks] == [[7, 8]]
        assert len(client.submitted) == 2 and outcome.attempts == 2
        assert outcome.completion.status == Status.QUEUE_FULL
        assert outcome.stop == RetryStop.FINAL

    run(main(), 10)


def test_ring_full_is_retried_and_the_last_one_raised() -> None:
    async def main() -> None:
        client = _FakeClient(ring_full=2)
        client.on_submit = lambda req: (req._on_chunk(_chunk(req, 0, [1])),
                                        req._on_final(Completion(req.id, 3, Status.OK, 1)))
        stream = _stream(client)
        assert [c.tokens for c in [c async for c in stream]] == [[1]]
        assert (await stream).attempts == 3

        always = _FakeClient(ring_full=100)
        stream = _stream(always, RetryPolicy(max_attempts=3, base_backoff=0.001))
        try:
            async for _ in stream:
                raise AssertionError("no attempt got in")
        except RingFull:
            pass
        else:
            raise AssertionError("RingFull was not raised")
        assert stream.attempts == 3

    run(main(), 10)


def test_an_attempt_without_news_in_attempt_timeout_is_cancelled_and_times_out() -> None:
    async def main() -> None:
        client = _FakeClient()
        stream = _stream(client, RetryPolicy(attempt_timeout=0.05))
        try:
            await stream.__anext__()
        except TimedOut:
            pass
        else:
            raise AssertionError("TimedOut was not raised")
        assert client.cancelled == [1] and len(client.submitted) == 1

    run(main(), 10)


def test_cancelling_the_reader_cancels_the_attempt_and_submits_nothing_more() -> None:
    async def main() -> None:
        client = _FakeClient()
        stream = _stream(client)
        task = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        assert client.cancelled == [1]
        req = client.submitted[0]
        req._on_final(Completion(req.id, 3, Status.CANCELLED))
        assert [c async for c in stream] == []
        assert (await stream).completion.status == Status.CANCELLED
        assert len(client.submitted) == 1

    run(main(), 10)
