"""The daemon goes away with requests outstanding: each ends SHUTTING_DOWN
exactly once, the client says it is disconnected, and once the daemon is
back a new connection works (and a client with reconnect carries on)."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from conftest import Daemon, run, wait_until
from fairsched import AsyncClient, Client, DaemonLost, NotConnected, Status


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
def test_async_requests_end_shutting_down_and_a_new_connect_works(
    daemon: Daemon, sig: int
) -> None:
    async def main() -> None:
        client = await AsyncClient.connect(daemon.socket, name="py-restart")
        t = await client.open_tenant("acme")
        # No worker serves chat: these wait in the queue when the daemon goes.
        reqs = [client.submit(t, "chat", [i], max_output_tokens=4, stream=True, tag=i)
                for i in range(20)]
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, wait_until, lambda: daemon.status()["queued"] == 20, 10,
                                   "the 20 requests to wait in the daemon's queue")
        await loop.run_in_executor(None, daemon.stop, sig)
        finals = await asyncio.wait_for(asyncio.gather(*reqs), 10)
        assert [f.tag for f in finals] == list(range(20))
        assert all(f.status == Status.SHUTTING_DOWN for f in finals), finals
        if sig == signal.SIGKILL:
            assert all(f.local for f in finals)  # made up by the library
        assert client.outstanding == 0
        assert not client.connected
        with pytest.raises(NotConnected):
            client.submit(t, "chat", [1], max_output_tokens=1)
        client.close()

        await asyncio.get_running_loop().run_in_executor(None, daemon.start)
        async with await AsyncClient.connect(daemon.socket) as again:
            t2 = await again.open_tenant("acme")
            assert (await again.submit(t2, "embed", [1], max_output_tokens=0)).status == Status.OK

    run(main(), 60)


def test_blocking_wait_reports_the_loss_and_the_requests_are_ready(daemon: Daemon) -> None:
    with Client.connect(daemon.socket) as client:
        t = client.open_tenant("acme")
        ids = {client.submit(t, "chat", [i], max_output_tokens=2) for i in range(5)}
        daemon.stop(signal.SIGKILL)
        with pytest.raises(DaemonLost):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                client.wait(1.0)
        got = client.poll()
        assert {c.request_id for c in got} == ids
        assert all(c.status == Status.SHUTTING_DOWN and c.local for c in got)
        assert client.poll() == []
        with pytest.raises(NotConnected):
            client.wait(0.1)


def test_a_client_with_reconnect_submits_again_after_a_restart(daemon: Daemon) -> None:
    async def main() -> None:
        client = await AsyncClient.connect(daemon.socket, reconnect=True,
                                           reconnect_initial_delay=0.02,
                                           reconnect_max_delay=0.1)
        t = await client.open_tenant("acme")
        before = client.submit(t, "chat", [1], max_output_tokens=2)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, daemon.stop, signal.SIGKILL)
        assert (await asyncio.wait_for(before, 10)).status == Status.SHUTTING_DOWN
        await loop.run_in_executor(None, daemon.start)

        # The same tenant handle, once the client has connected again.
        async def submit_again() -> Status:
            deadline = time.monotonic() + 10
            while True:
                try:
                    req = client.submit(t, "embed", [2], max_output_tokens=0)
                except NotConnected:
                    assert time.monotonic() < deadline, "no reconnect in 10 s"
                    await asyncio.sleep(0.05)
                    continue
                return (await req).status

        assert await submit_again() == Status.OK
        assert client.connected
        client.close()

    run(main(), 60)


def test_blocking_clients_in_threads_all_see_the_loss(daemon: Daemon) -> None:
    import threading

    clients = [Client.connect(daemon.socket) for _ in range(3)]
    tenants = [c.open_tenant("acme") for c in clients]
    for c, t in zip(clients, tenants):
        c.submit(t, "chat", [1], max_output_tokens=1)
    results: list[object] = []

    def waiter(c: Client) -> None:
        try:
            while True:
                c.wait(1.0)
                got = c.poll()
                if got:
                    results.append(got[0].status)
                    return
        except DaemonLost:
            results.append(c.poll()[0].status)

    threads = [threading.Thread(target=waiter, args=(c,)) for c in clients]
    for th in threads:
        th.start()
    daemon.stop(signal.SIGKILL)
    for th in threads:
        th.join(15)
        assert not th.is_alive()
    assert results == [Status.SHUTTING_DOWN] * 3
    wait_until(lambda: not any(c.connected for c in clients), 5, "every client to see the loss")
    for c in clients:
        c.close()


def test_a_stream_cut_by_the_loss_reports_the_tokens_it_streamed(daemon: Daemon) -> None:
    from fairsched import Worker

    worker = Worker.connect(daemon.socket, "chat")
    worker.set_capacity(1, 10_000)
    client = Client.connect(daemon.socket)
    t = client.open_tenant("acme")
    rid = client.submit(t, "chat", [1, 2], max_output_tokens=100, stream=True)
    assert worker.wait(10)
    [item] = worker.poll()
    worker.emit(item.id, [5, 6, 7])
    worker.emit(item.id, [8, 9])
    streamed: list[int] = []
    deadline = time.monotonic() + 10
    while len(streamed) < 5:
        assert time.monotonic() < deadline, "the chunks did not arrive"
        client.wait(1.0)
        streamed += [tok for c in client.poll() for tok in c.tokens]
    assert streamed == [5, 6, 7, 8, 9]

    daemon.stop(signal.SIGKILL)
    final = None
    deadline = time.monotonic() + 10
    while final is None:
        assert time.monotonic() < deadline, "no final completion after the loss"
        try:
            client.wait(1.0)
        except DaemonLost:
            pass
        for c in client.poll():
            assert not c.partial
            final = c
    assert final.request_id == rid
    assert final.status == Status.SHUTTING_DOWN and final.local
    assert final.output_tokens == 5
    client.close()
    worker.close()
