"""What makes the package feel native: a docstring on every public member,
reprs that show state, errors that say their code once, and a clear error
when an asyncio object is used from another event loop."""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

import fairsched
from conftest import Daemon, run
from fairsched import (
    AsyncClient,
    AsyncWorker,
    Client,
    ErrorCode,
    RetryBudget,
    Unauthorized,
    Worker,
)


def _public_members() -> list[tuple[str, Any]]:
    """Every public class and function of ``fairsched.__all__`` and every
    public method and property (static, class and instance) that the
    package defines on those classes, inherited ones included."""
    out: list[tuple[str, Any]] = []
    for name in fairsched.__all__:
        obj = getattr(fairsched, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        out.append((name, obj))
        if not inspect.isclass(obj):
            continue
        for member in dir(obj):
            if member.startswith("_"):
                continue
            owner = next((k for k in obj.__mro__ if member in vars(k)), None)
            if owner is None or not owner.__module__.startswith("fairsched"):
                continue  # object's, Exception's, Enum's
            attr = vars(owner)[member]
            if isinstance(attr, (staticmethod, classmethod)):
                attr = attr.__func__
            if isinstance(attr, property) or inspect.isfunction(attr):
                out.append((f"{name}.{member}", attr))
    return out


def test_every_public_class_function_method_and_property_has_a_docstring() -> None:
    members = _public_members()
    assert len(members) > 100  # the walk reaches the members, not only the names
    missing = [name for name, obj in members if not (inspect.getdoc(obj) or "").strip()]
    assert missing == []


def test_errors_say_their_code_once_and_repr_as_their_class() -> None:
    lib_message = ("unauthorized: the daemon refused tenant 'nope': UNAUTHORIZED: "
                   "no client rule of uid 1000 lists tenant 'nope'")
    e = fairsched.errors.make_error(
        ErrorCode.UNAUTHORIZED, fairsched.errors.library_message(ErrorCode.UNAUTHORIZED,
                                                                 lib_message))
    assert type(e) is Unauthorized
    assert str(e) == ("UNAUTHORIZED: the daemon refused tenant 'nope': "
                      "no client rule of uid 1000 lists tenant 'nope'")
    assert repr(e) == f"fairsched.Unauthorized({e.message!r})"
    # A refusal status that is not the code's name says something: it stays.
    refused = fairsched.errors.library_message(
        ErrorCode.REFUSED, "refused by the daemon: the daemon refused Hello: BAD_REQUEST: x")
    assert refused == "the daemon refused Hello: BAD_REQUEST: x"
    assert fairsched.errors.library_message(ErrorCode.RING_FULL, "submission ring full") == ""
    assert str(fairsched.RingFull("")) == "RING_FULL"


def test_a_refused_tenant_raises_unauthorized_naming_the_code_once(tmpdir_short: Path) -> None:
    d = Daemon(tmpdir_short)
    d.config.write_text(d.config.read_text().replace('tenants = ["*"]', 'tenants = ["acme"]'))
    d.start()
    try:
        with Client.connect(d.socket) as client:
            client.open_tenant("acme")
            with pytest.raises(Unauthorized) as e:
                client.open_tenant("intruder")
        text = str(e.value)
        assert text.startswith("UNAUTHORIZED: ")
        assert text.upper().count("UNAUTHORIZED") == 1, text
        assert "intruder" in text
    finally:
        d.stop(signal.SIGKILL)


def test_reprs_show_socket_state_and_pid_of_each_object(daemon: Daemon) -> None:
    daemon.cpp_worker()
    pid = os.getpid()
    client = Client.connect(daemon.socket, name="repr")
    r = repr(client)
    assert r.startswith("<fairsched.Client ") and repr(daemon.socket) in r
    assert " connected " in r and f"pid={pid}" in r
    client.close()
    assert " closed " in repr(client)

    worker = Worker.connect(daemon.socket, "chat")
    r = repr(worker)
    assert r.startswith("<fairsched.Worker endpoint='chat' ") and f"id={worker.worker_id}" in r
    assert " connected " in r and repr(daemon.socket) in r
    worker.close()
    assert " closed " in repr(worker)

    b = RetryBudget(ratio=0.5, max_tokens=4)
    assert repr(b) == "<fairsched.RetryBudget tokens=4/4 ratio=0.5>"

    async def main() -> None:
        async with AsyncClient.connect(daemon.socket) as c:
            t = await c.open_tenant("acme")
            assert repr(t).startswith("Tenant(name='acme', index=")
            req = c.submit(t, "chat", [1, 2], max_output_tokens=2)
            r = repr(c)
            assert r.startswith("<fairsched.AsyncClient ") and repr(daemon.socket) in r
            assert " connected " in r and "outstanding=1" in r
            assert repr(req) == f"<fairsched.Request id={req.id} tag=0 outstanding>"
            await req
            assert "outstanding=0" in repr(c)
        assert " closed " in repr(c)
        async with AsyncWorker.connect(daemon.socket, "chat") as w:
            r = repr(w)
            assert r.startswith("<fairsched.AsyncWorker endpoint='chat' ") and " connected " in r
        assert " closed " in repr(w)

    run(main(), 30)


def _in_another_loop(coro_fn: Any) -> BaseException:
    """Runs ``coro_fn()`` in a new event loop on another thread; what it raised."""
    raised: list[BaseException] = []

    def thread() -> None:
        try:
            asyncio.run(asyncio.wait_for(coro_fn(), 10))
        except BaseException as e:  # noqa: BLE001 (the test looks at it)
            raised.append(e)

    t = threading.Thread(target=thread)
    t.start()
    t.join(20)
    assert not t.is_alive() and raised, "the call on another loop did not raise"
    return raised[0]


def test_an_async_client_or_worker_used_from_another_loop_says_fairsched(daemon: Daemon) -> None:
    async def main() -> None:
        async with AsyncClient.connect(daemon.socket) as c:
            t = await c.open_tenant("acme")
            req = c.submit(t, "chat", [1], max_output_tokens=3, stream=True)  # no worker yet

            async def submit_there() -> None:
                c.submit(t, "chat", [1], max_output_tokens=1)

            async def open_there() -> None:
                await c.open_tenant("other")

            async def await_there() -> None:
                await req

            async def retry_there() -> None:
                await c.submit_with_retry(t, "chat", [1], max_output_tokens=1)

            async def stream_there() -> None:
                async for _ in c.stream_with_retry(t, "chat", [1], max_output_tokens=1):
                    pass

            for fn in (submit_there, open_there, await_there, retry_there, stream_there):
                e = await asyncio.get_running_loop().run_in_executor(None, _in_another_loop, fn)
                assert isinstance(e, RuntimeError), (fn.__name__, e)
                assert str(e).startswith("fairsched.AsyncClient is bound to the event loop "
                                         "it was connected on"), (fn.__name__, e)
            # Nothing of that hurt the client on its own loop.
            daemon.cpp_worker()  # the request waited in its queue until now
            assert (await req).ok
            assert (await c.submit(t, "chat", [1], max_output_tokens=1)).ok

        async with AsyncWorker.connect(daemon.socket, "chat") as w:
            async def wait_there() -> None:
                await w.next_items(0.01)

            e = await asyncio.get_running_loop().run_in_executor(None, _in_another_loop,
                                                                 wait_there)
            assert isinstance(e, RuntimeError)
            assert str(e).startswith("fairsched.AsyncWorker is bound to the event loop"), e

    run(main(), 60)
