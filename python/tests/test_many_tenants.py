"""Tenants are handles, not rings: ten thousand tenants on one connection
from Python, each request answered with its own tokens; close_tenant ends a
tenant's queued requests CANCELLED and releases it in the daemon; the
asyncio client opens and closes in batches too."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from conftest import Daemon, reference_tokens, seed, wait_until
from fairsched import AsyncClient, Client, Completion, RingFull, Status, UnknownTenant

N = 10_000


class Collector:
    """Streamed tokens and final completions of one client, by request id."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.tokens: dict[int, list[int]] = {}
        self.finals: dict[int, Completion] = {}

    def drain(self, timeout: float = 0.01) -> None:
        self.client.wait(timeout)
        while batch := self.client.poll():
            self._take(batch)

    def _take(self, batch: list[Completion]) -> None:
        for c in batch:
            assert c.request_id not in self.finals, f"a completion after the final one: {c}"
            if c.partial:
                got = self.tokens.setdefault(c.request_id, [])
                assert c.first_token == len(got)
                got.extend(c.tokens)
            else:
                self.finals[c.request_id] = c

    def until(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.finals) < n:
            assert time.monotonic() < deadline, f"{n - len(self.finals)} requests unanswered"
            self.drain(0.05)


def test_ten_thousand_tenants_on_one_connection_each_get_their_own_tokens(daemon: Daemon) -> None:
    daemon.cpp_worker()
    rng = random.Random(seed())
    with Client.connect(daemon.socket, name="py-many") as client:
        names = [f"org-{i}" for i in range(N)]
        t0 = time.monotonic()
        tenants = client.open_tenants(names)
        print(f"opened {N} tenants in {(time.monotonic() - t0) * 1e3:.1f} ms")
        assert [t.name for t in tenants] == names
        assert len({t.index for t in tenants}) == N
        assert client.open_tenant("org-77") == tenants[77], "the handle already open"
        assert daemon.status()["counters"]["tenant_handles_open"] == N

        got = Collector(client)
        want: dict[int, tuple[list[int], int]] = {}
        for i, t in enumerate(tenants):
            if i % 256 == 0:
                # A client that keeps reading while it submits: the daemon holds
                # only client_buffer_chunks of streamed tokens for a client that
                # stops reading, and 10,000 streams outgrow that.
                got.drain(0)
            prompt = [rng.randrange(2**32) for _ in range(rng.randrange(1, 6))]
            while True:
                try:
                    rid = client.submit(t, "chat", prompt, max_output_tokens=2, stream=True, tag=i)
                    break
                except RingFull:
                    got.drain()
            want[rid] = (prompt, i)
        got.until(N, 120)
        for rid, (prompt, i) in want.items():
            final = got.finals[rid]
            assert final.status == Status.OK and final.tag == i, final
            assert got.tokens[rid] == reference_tokens(prompt, 2), f"tenant {i}"

        client.close_tenants(tenants[::2])
        assert daemon.status()["counters"]["tenant_handles_open"] == N // 2
        client.close_tenant(tenants[1])
        assert daemon.status()["counters"]["tenant_handles_open"] == N // 2 - 1
        with pytest.raises(UnknownTenant):
            client.submit(tenants[0], "chat", [1], max_output_tokens=1)
        with pytest.raises(UnknownTenant):
            client.close_tenant(tenants[0])
        again = client.open_tenant("org-0")
        assert again.index != tenants[0].index, "a new handle for the same name"
    wait_until(lambda: daemon.status()["counters"]["tenant_handles_open"] == 0, 10,
               "the daemon to release the tenants of the closed client")


def test_close_tenant_ends_its_queued_requests_cancelled_and_spares_the_others(
        daemon: Daemon) -> None:
    # No worker attached: every request waits in the daemon's queues.
    with Client.connect(daemon.socket, name="py-close") as client:
        gone, kept = client.open_tenants(["gone", "kept"])
        ids_gone = {client.submit(gone, "chat", [1, 2], max_output_tokens=4) for _ in range(30)}
        ids_kept = {client.submit(kept, "chat", [3], max_output_tokens=4) for _ in range(5)}
        wait_until(lambda: daemon.status()["counters"]["submissions"] >= 35, 10,
                   "the daemon to take the 35 requests")
        client.close_tenant(gone)
        got = Collector(client)
        got.until(30, 10)
        assert set(got.finals) == ids_gone
        assert {c.status for c in got.finals.values()} == {Status.CANCELLED}
        daemon.cpp_worker()  # now the kept tenant's requests run
        got.until(35, 30)
        assert {got.finals[i].status for i in ids_kept} == {Status.OK}


def test_the_asyncio_client_opens_and_closes_tenants_in_batches(daemon: Daemon) -> None:
    daemon.cpp_worker()

    async def main() -> None:
        client = await AsyncClient.connect(daemon.socket, name="py-aio-many")
        try:
            tenants = await client.open_tenants([f"a-{i}" for i in range(500)])
            assert len({t.index for t in tenants}) == 500
            assert await client.open_tenant("a-3") == tenants[3]
            requests = [client.submit(t, "chat", [i + 1], max_output_tokens=1)
                        for i, t in enumerate(tenants[:50])]
            done = await asyncio.gather(*requests)
            assert all(c.status == Status.OK for c in done)
            await client.close_tenant(tenants[3])
            with pytest.raises(UnknownTenant):
                client.submit(tenants[3], "chat", [1], max_output_tokens=1)
            assert (await client.open_tenant("a-3")).index != tenants[3].index
        finally:
            client.close()

    asyncio.run(main())
