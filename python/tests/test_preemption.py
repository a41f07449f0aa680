"""Preemption through a Python worker: the daemon asks for a running
sequence back (WorkKind.PREEMPT), the engine answers Worker.preempted(), the
request resumes later with the ids it generated (WorkItem.resumed), and the
client's stream goes on with no token repeated or missing."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from conftest import BIN, Daemon, reference_tokens, run
from fairsched import AsyncClient, Status


@pytest.mark.preempting
def test_a_python_engine_gives_a_sequence_back_and_the_streams_go_on(daemon: Daemon) -> None:
    # Two sequences of 2 ms steps: heavy's two 300-token generations fill
    # them for about 0.6 s; light arrives once both are streaming.
    engine = daemon.python_engine("--max-sequences", "2", "--step-us", "2000")

    async def main() -> list[str]:
        async with await AsyncClient.connect(daemon.socket) as client:
            heavy = await client.open_tenant("heavy")
            light = await client.open_tenant("light")
            prompts = [[11, 12, 13], [21, 22], [31]]
            order: list[str] = []
            got: dict[str, list[int]] = {"h0": [], "h1": [], "light": []}
            started = asyncio.Event()

            async def one(name: str, tenant: object, prompt: list[int], n: int) -> None:
                req = client.submit(tenant, "chat", prompt, max_output_tokens=n,  # type: ignore[arg-type]
                                    stream=True)
                async for t in req.tokens():
                    got[name].append(t)
                    if len(got["h0"]) >= 10 and len(got["h1"]) >= 10:
                        started.set()
                final = await req
                assert final.status == Status.OK, (name, final)
                assert final.output_tokens == n
                order.append(name)

            heavies = [asyncio.create_task(one(f"h{i}", heavy, prompts[i], 300)) for i in (0, 1)]
            await asyncio.wait_for(started.wait(), 20)
            await one("light", light, prompts[2], 5)
            await asyncio.gather(*heavies)
            for name, prompt, n in (("h0", prompts[0], 300), ("h1", prompts[1], 300),
                                    ("light", prompts[2], 5)):
                assert got[name] == reference_tokens(prompt, n), name
            return order

    order = run(main(), 60)
    assert order[0] == "light", order  # it did not wait for a heavy generation to end
    out = subprocess.run([str(BIN / "fairschedctl"), "--socket", daemon.socket, "status", "--json"],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert status["preemptions"]["chat"] >= 1, status
    assert status["preempts_ignored"] == 0, status
    engine.stop()
