"""Preemption through a Python worker: the daemon asks for a running
sequence back (WorkKind.PREEMPT), the engine answers Worker.preempted(), the
request resumes later with the ids it generated (WorkItem.resumed), and the
client's stream goes on with no token repeated or missing."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Callable

import pytest

from conftest import BIN, Daemon, reference_tokens, run
from fairsched import AsyncClient, Status


@pytest.mark.preempting
def test_a_python_engine_gives_a_sequence_back_and_the_streams_go_on(daemon: Daemon) -> None:
    # Two sequences of 5 ms steps: heavy's two 4000-token generations (20 s
    # each) fill them for far longer than the test runs, so light, arriving
    # once both are streaming, gets a sequence only by preemption, and ends
    # while both heavy generations are still going, however slow the
    # machine. Once both have streamed on past light's end (the preempted one
    # resumed), they are cancelled: every token each received is its own, in
    # order, none repeated or missing.
    engine = daemon.python_engine("--max-sequences", "2", "--step-us", "5000")
    heavy_tokens = 4000

    async def main() -> None:
        async with await AsyncClient.connect(daemon.socket) as client:
            heavy = await client.open_tenant("heavy")
            light = await client.open_tenant("light")
            prompts = {"h0": [11, 12, 13], "h1": [21, 22], "light": [31]}
            got: dict[str, list[int]] = {name: [] for name in prompts}
            news = asyncio.Event()

            async def until(cond: Callable[[], bool]) -> None:
                while not cond():
                    news.clear()
                    await news.wait()

            async def stream(name: str, req):  # type: ignore[no-untyped-def]
                async for t in req.tokens():
                    got[name].append(t)
                    news.set()
                return await req

            heavies = {name: client.submit(heavy, "chat", prompts[name],  # type: ignore[arg-type]
                                           max_output_tokens=heavy_tokens, stream=True)
                       for name in ("h0", "h1")}
            tasks = {name: asyncio.create_task(stream(name, req)) for name, req in heavies.items()}
            await until(lambda: len(got["h0"]) >= 10 and len(got["h1"]) >= 10)
            light_req = client.submit(light, "chat", prompts["light"],  # type: ignore[arg-type]
                                      max_output_tokens=5, stream=True)
            final = await stream("light", light_req)
            assert final.status == Status.OK, final
            assert final.output_tokens == 5
            assert got["light"] == reference_tokens(prompts["light"], 5)
            # It did not wait for a heavy generation to end.
            assert not any(req.done() for req in heavies.values())
            at_light = {name: len(got[name]) for name in heavies}
            await until(lambda: all(len(got[n]) >= at_light[n] + 10 for n in heavies))
            for req in heavies.values():
                assert req.cancel()
            for name, task in tasks.items():
                final = await task
                assert final.status == Status.CANCELLED, (name, final)
                assert final.output_tokens == len(got[name]) < heavy_tokens, (name, final)
                assert got[name] == reference_tokens(prompts[name], len(got[name])), name

    run(main(), 60)
    out = subprocess.run([str(BIN / "fairschedctl"), "--socket", daemon.socket, "status", "--json"],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert status["preemptions"]["chat"] >= 1, status
    assert status["preempts_ignored"] == 0, status
    engine.stop()
