"""The worker role end to end: a hand-written blocking loop (assignments with
their prompt, params, priority and deadline; emit; finish; abort), the
asyncio worker, and examples/python_reference_engine.py serving clients."""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import BIN, REPO, Daemon, Process, reference_tokens, run, seed
from fairsched import (
    AsyncClient,
    AsyncWorker,
    Client,
    DaemonLost,
    InvalidArgument,
    NotConnected,
    ShuttingDown,
    Status,
    Worker,
    WorkItem,
    WorkKind,
    prefix_block_hashes,
)


def test_a_blocking_worker_loop_serves_a_streaming_client(daemon: Daemon) -> None:
    seen: list[WorkItem] = []
    stop = threading.Event()
    errors: list[BaseException] = []
    stats = []

    def engine() -> None:
        try:
            with Worker.connect(daemon.socket, "chat", name="py-loop") as w:
                w.set_capacity(4, 100_000)
                while not stop.is_set():
                    if not w.wait(0.05):
                        continue
                    for item in w.poll():
                        seen.append(item)
                        assert item.kind == WorkKind.ASSIGN
                        out = reference_tokens(item.prompt, item.max_output_tokens)
                        half = len(out) // 2
                        w.emit(item.id, out[:half])
                        w.emit(item.id, out[half:])
                        w.finish(item.id, Status.OK, len(out))
                        w.set_capacity(4, 100_000)
                stats.append(w.stats())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    th = threading.Thread(target=engine)
    th.start()
    try:
        with Client.connect(daemon.socket) as client:
            t = client.open_tenant("acme")
            deadline = time.monotonic() + 30
            a = client.submit(t, "chat", [3, 1, 4], max_output_tokens=10, stream=True,
                              params=b"temperature=0", priority=5, deadline=deadline, tag=1)
            b = client.submit(t, "chat", [], max_output_tokens=7, stream=True,
                              params="model=π", tag=2)
            tokens: dict[int, list[int]] = {a: [], b: []}
            finals = {}
            end = time.monotonic() + 20
            while len(finals) < 2:
                assert time.monotonic() < end, "the worker did not serve both requests"
                client.wait(1.0)
                for c in client.poll():
                    if c.partial:
                        tokens[c.request_id].extend(c.tokens)
                    else:
                        finals[c.request_id] = c
            assert tokens[a] == reference_tokens([3, 1, 4], 10)
            assert tokens[b] == [j + 1 for j in range(7)]
            assert finals[a].status == Status.OK and finals[a].output_tokens == 10
            assert finals[a].input_tokens == 3
    finally:
        stop.set()
        th.join(10)
    assert not errors, errors
    s = stats[0]
    assert (s.assigned, s.finished, s.tokens_emitted) == (2, 2, 10 + 7)
    by_prompt = {tuple(i.prompt): i for i in seen}
    first = by_prompt[(3, 1, 4)]
    assert first.params == b"temperature=0" and first.priority == 5
    assert first.deadline is not None and abs(first.deadline - deadline) < 1e-3
    assert first.prompt_tokens == 3 and not first.counts_only
    second = by_prompt[()]
    assert second.params == "model=π".encode() and second.deadline is None


def test_an_abort_reaches_the_worker_and_the_client_gets_cancelled(daemon: Daemon) -> None:
    async def main() -> None:
        worker = await AsyncWorker.connect(daemon.socket, "chat", name="py-abort")
        client = await AsyncClient.connect(daemon.socket)
        t = await client.open_tenant("acme")
        worker.set_capacity(2, 10_000)
        req = client.submit(t, "chat", [9], max_output_tokens=100, stream=True)
        items = await worker.next_items(10)
        assert [i.kind for i in items] == [WorkKind.ASSIGN]
        rid = items[0].id
        worker.emit(rid, [10, 11])
        chunk = await req.__anext__()
        assert chunk.tokens == [10, 11]
        assert req.cancel()
        final = await req
        assert final.status == Status.CANCELLED and final.output_tokens == 2
        aborts = await worker.next_items(10)
        assert [(i.kind, i.id) for i in aborts] == [(WorkKind.ABORT, rid)]
        worker.finish(rid, Status.CANCELLED, 2)
        # Nothing more to do: wait() times out within its bound.
        start = time.monotonic()
        assert await worker.wait(0.2) is False
        assert time.monotonic() - start < 5
        assert worker.stats().aborted == 1
        client.close()
        worker.close()

    run(main(), 30)


def test_emit_step_streams_one_token_of_each_sequence_in_one_record(daemon: Daemon) -> None:
    async def main() -> None:
        worker = await AsyncWorker.connect(daemon.socket, "chat", name="py-step")
        client = await AsyncClient.connect(daemon.socket)
        t = await client.open_tenant("acme")
        worker.set_capacity(4, 10_000)
        reqs = [client.submit(t, "chat", [i + 1], max_output_tokens=3, stream=True)
                for i in range(3)]
        ids: list[int] = []
        while len(ids) < 3:
            ids += [i.id for i in await worker.next_items(10) if i.kind == WorkKind.ASSIGN]
        by_prompt = {}
        for step in range(3):  # three steps, one token of every sequence each
            worker.emit_step([(rid, 100 * k + step) for k, rid in enumerate(ids)])
        for rid in ids:
            worker.finish(rid, Status.OK, 3)
        for r in reqs:
            got: list[int] = []
            async for chunk in r:
                got += chunk.tokens
            final = await r
            assert final.status == Status.OK and final.output_tokens == 3
            by_prompt[r.id] = got
        # Each request got its own entries, in step order.
        streams = sorted(by_prompt.values())
        assert streams == [[100 * k, 100 * k + 1, 100 * k + 2] for k in range(3)]
        with pytest.raises(InvalidArgument):
            worker.emit_step([])
        with pytest.raises(InvalidArgument):
            worker.emit_step([(ids[0], 2**32)])
        assert worker.stats().tokens_emitted == 9
        client.close()
        worker.close()

    run(main(), 30)


def test_a_worker_sees_the_daemon_go(daemon: Daemon) -> None:
    async def main() -> None:
        worker = await AsyncWorker.connect(daemon.socket, "chat")
        worker.set_capacity(1, 1000)
        await asyncio.get_running_loop().run_in_executor(None, daemon.stop, signal.SIGKILL)
        try:
            for _ in range(100):
                await worker.next_items(0.1)
                worker.set_capacity(1, 1000)
        except DaemonLost:
            pass
        else:
            raise AssertionError("the worker never noticed the daemon's death")
        assert not worker.connected
        worker.close()

    run(main(), 30)


def test_the_python_reference_engine_serves_many_streams(daemon: Daemon) -> None:
    engine = daemon.python_engine("--step-us", "100")
    rng = random.Random(seed())

    async def main() -> None:
        async with await AsyncClient.connect(daemon.socket) as client:
            tenants = [await client.open_tenant(n) for n in ("a", "b", "c")]

            async def one(i: int) -> None:
                prompt = [rng.randrange(2**32) for _ in range(rng.randrange(0, 12))]
                n = rng.randrange(1, 40)
                stop_at = rng.choice([None, rng.randrange(1, n + 1)])
                params = f"temperature=0;output_tokens={stop_at}" if stop_at else None
                req = client.submit(tenants[i % 3], "chat", prompt, max_output_tokens=n,
                                    params=params, stream=True, tag=i)
                got = [t async for t in req.tokens()]
                final = await req
                want = stop_at or n
                assert final.status == Status.OK and final.output_tokens == want
                assert got == reference_tokens(prompt, want)

            await asyncio.gather(*(one(i) for i in range(120)))

            # Counts only: the engine gets no ids, so the tokens are j + 1.
            req = client.submit(tenants[0], "chat", max_output_tokens=5, prompt_token_count=50,
                                params=b"body=ref-1", stream=True)
            assert [t async for t in req.tokens()] == [1, 2, 3, 4, 5]
            assert (await req).input_tokens == 50

    run(main(), 90)
    assert engine.stop(signal.SIGTERM) == 0, engine.output()
    assert "finished" in engine.output()


def test_two_python_engines_share_an_endpoint(daemon: Daemon) -> None:
    daemon.python_engine("--max-sequences", "4", "--name", "py-one")
    daemon.python_engine("--max-sequences", "4", "--name", "py-two")

    async def main() -> None:
        async with await AsyncClient.connect(daemon.socket) as client:
            t = await client.open_tenant("acme")
            reqs = [client.submit(t, "chat", [i], max_output_tokens=20, tag=i) for i in range(40)]
            finals = await asyncio.gather(*reqs)
            assert all(f.status == Status.OK and f.output_tokens == 20 for f in finals)

    run(main(), 60)
    status = subprocess.run([str(BIN / "fairschedctl"), "--socket", daemon.socket, "status"],
                            capture_output=True, text=True, timeout=10)
    assert status.returncode == 0, status.stderr
    assert "py-one" in status.stdout and "py-two" in status.stdout, status.stdout


def test_the_docs_worker_example_serves_streams_and_aborts(daemon: Daemon) -> None:
    example = REPO / "examples" / "python_worker.py"
    doc = (REPO / "docs" / "python.md").read_text()
    assert example.read_text() in re.findall(r"```python\n(.*?)```", doc, re.S), \
        "docs/python.md's worker example differs from examples/python_worker.py"
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    # 20 ms per step: the 4000-token request would run for 80 s.
    worker = Process([sys.executable, str(example), "--socket", daemon.socket, "--step-ms", "20"],
                     daemon.dir / "python-worker.log", env)
    daemon.children.append(worker)

    async def main() -> None:
        async with await AsyncClient.connect(daemon.socket) as client:
            t = await client.open_tenant("acme")
            reqs = [(p, n, client.submit(t, "chat", p, max_output_tokens=n, stream=True))
                    for p, n in (([1, 2], 5), ([], 3), ([7], 40), ([4], 0))]
            for prompt, n, req in reqs:
                assert [x async for x in req.tokens()] == reference_tokens(prompt, n)
                assert (await req).output_tokens == n
            long = client.submit(t, "chat", [9], max_output_tokens=4000, stream=True)
            await long.__anext__()
            long.cancel()
            assert (await long).status == Status.CANCELLED

    run(main(), 30)
    assert worker.stop(signal.SIGTERM) == 0, worker.output()


def test_closing_an_async_worker_ends_a_task_waiting_for_work(daemon: Daemon) -> None:
    async def main() -> None:
        worker = await AsyncWorker.connect(daemon.socket, "chat", name="py-closing")
        waiting = asyncio.ensure_future(worker.next_items(None))  # nothing will come
        await asyncio.sleep(0.05)
        assert not waiting.done()
        worker.close()
        with pytest.raises(NotConnected):
            await asyncio.wait_for(waiting, 5)  # at once, not after the 5 s
        with pytest.raises(NotConnected):
            await worker.next_items(0.1)
        worker.close()  # idempotent

    asyncio.run(main())


def test_a_worker_finishes_with_its_prompt_count_and_knows_its_id(daemon: Daemon) -> None:
    async def main() -> None:
        async with AsyncWorker.connect(daemon.socket, "chat", name="py-counted") as worker:
            assert worker.endpoint == "chat"
            listed = [w for w in daemon.status()["workers"] if w["name"] == "py-counted"]
            assert [w["id"] for w in listed] == [worker.worker_id]
            assert worker.worker_id == worker.worker.worker_id > 0
            async with AsyncClient.connect(daemon.socket) as client:
                t = await client.open_tenant("acme")
                worker.set_capacity(1, 10_000)
                req = client.submit(t, "chat", [5, 6, 7], max_output_tokens=4)
                items = await worker.next_items(10)
                assert [i.kind for i in items] == [WorkKind.ASSIGN]
                assert items[0].prompt_tokens == 3
                worker.emit(items[0].id, [1, 2])
                # The engine counted the prompt as 11 tokens (a proxy's upstream usage).
                worker.finish(items[0].id, Status.OK, 2, input_tokens=11)
                final = await req
                assert final.status == Status.OK and final.output_tokens == 2
                assert final.input_tokens == 11

    run(main(), 30)


def test_connecting_a_worker_during_a_drain_raises_shutting_down(daemon: Daemon) -> None:
    ctl = [str(BIN / "fairschedctl"), "--socket", daemon.socket]
    out = subprocess.run(ctl + ["drain"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    with pytest.raises(ShuttingDown, match="draining"):
        Worker.connect(daemon.socket, "chat")
    out = subprocess.run(ctl + ["resume"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    with Worker.connect(daemon.socket, "chat") as w:
        assert w.endpoint == "chat"


def _fnv_chain(tokens: list[int], block: int) -> list[int]:
    """prefix_hash.hpp's chain, written out again: FNV-1a over the ids,
    chained across blocks, each block's value finalised."""
    m = (1 << 64) - 1

    def fin(x: int) -> int:
        x ^= x >> 33
        x = (x * 0xFF51AFD7ED558CCD) & m
        x ^= x >> 33
        x = (x * 0xC4CEB9FE1A85EC53) & m
        return x ^ (x >> 33)

    h, out = 0xCBF29CE484222325, []
    for b in range(len(tokens) // block):
        for t in tokens[b * block:(b + 1) * block]:
            h = ((h ^ t) * 0x100000001B3) & m
        out.append(fin(h))
    return out


@pytest.mark.prefix_routing
def test_kv_events_from_python_reach_the_daemon_and_its_hashes_are_the_documented_ones(
    daemon: Daemon,
) -> None:
    prompt = list(range(1000, 1064)) + [7] * 20  # five whole blocks of 16
    hashes = prefix_block_hashes(prompt)
    assert hashes == _fnv_chain(prompt, 16) and len(hashes) == 5
    assert prefix_block_hashes(prompt, 32) == hashes[1::2]  # a hash names a token boundary
    assert prefix_block_hashes(prompt, max_blocks=2) == hashes[:2]
    assert prefix_block_hashes(prompt[:15]) == []

    def row() -> dict:
        return [w for w in daemon.status()["workers"] if w["name"] == "py-kv"][0]["prefix_cache"]

    with Worker.connect(daemon.socket, "chat", name="py-kv") as worker:
        with pytest.raises(InvalidArgument):
            worker.blocks_stored([])
        with pytest.raises(InvalidArgument):
            worker.blocks_stored([1 << 64])
        worker.blocks_stored(hashes)
        worker.set_capacity(4, 1 << 20)
        with Client.connect(daemon.socket) as client:
            t = client.open_tenant("acme")
            client.submit(t, "chat", prompt, max_output_tokens=2)
            deadline = time.monotonic() + 30
            items: list[WorkItem] = []
            while not items and time.monotonic() < deadline:
                worker.wait(0.1)
                items = worker.poll()
            assert [i.kind for i in items] == [WorkKind.ASSIGN]
            got = row()
            assert got["source"] == "events" and got["blocks"] == 5
            assert got["assigned_blocks"] == 5 and got["hit_blocks"] == 5  # all of it held
            worker.finish(items[0].id, Status.OK, 0)
            # A counts-only request carries its prefix itself.
            client.submit(t, "chat", max_output_tokens=2, prompt_token_count=84,
                          prefix=hashes[:3])
            items = []
            while not items and time.monotonic() < deadline:
                worker.wait(0.1)
                items = worker.poll()
            assert [(i.kind, i.prompt_tokens, list(i.prompt)) for i in items] == [
                (WorkKind.ASSIGN, 84, [])]
            got = row()
            assert got["assigned_blocks"] == 8 and got["hit_blocks"] == 8
            worker.finish(items[0].id, Status.OK, 0)
            # The waiting form carries it too.
            done: list = []
            waiter = threading.Thread(target=lambda: done.append(client.submit_and_wait(
                t, "chat", max_output_tokens=2, prompt_token_count=84, prefix=hashes[:2],
                wait_timeout=30)))
            waiter.start()
            items = []
            while not items and time.monotonic() < deadline:
                worker.wait(0.1)
                items = worker.poll()
            assert row()["assigned_blocks"] == 10
            worker.finish(items[0].id, Status.OK, 0)
            waiter.join(30)
            assert [c.status for c in done] == [Status.OK]
            with pytest.raises(InvalidArgument):
                client.submit(t, "chat", max_output_tokens=2, prompt_token_count=84,
                              prefix=[-1])
            worker.blocks_removed(hashes[:1])
            deadline = time.monotonic() + 30
            while row()["blocks"] != 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert row()["blocks"] == 4
            worker.cache_cleared()
            while row()["blocks"] != 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert row()["blocks"] == 0 and row()["kv_events"] == 3
