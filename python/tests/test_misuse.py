"""What a caller may get wrong without crashing the interpreter or hurting
another process: close() while another thread is blocked in the same client
or worker, and a client or worker inherited by a child of os.fork()."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
from typing import Callable

import pytest

from conftest import REPO, Daemon, python_env
from fairsched import Client, FairschedError, NotConnected, Status, Worker


def _closed_while_blocked(
    call: Callable[[], object], close: Callable[[], None], settle: bool = True
) -> BaseException:
    """Runs ``call()`` in a thread, closes with ``close()`` (after a moment,
    when ``settle``: the call is blocked in the library by then), and returns
    what the call raised."""
    raised: list[BaseException] = []
    started = threading.Event()

    def blocked() -> None:
        started.set()
        try:
            call()
        except BaseException as e:  # noqa: BLE001 - returned to the test
            raised.append(e)

    th = threading.Thread(target=blocked)
    th.start()
    started.wait(5)
    if settle:
        time.sleep(0.02)
    # The call is on its way into the library, or blocked in it: either way
    # close() must end it, not free what it uses.
    close()
    th.join(10)
    assert not th.is_alive(), "close() did not end the blocked call"
    assert raised, "the blocked call returned normally after close()"
    return raised[0]


@pytest.mark.parametrize("attempt", range(10))
def test_closing_a_client_while_another_thread_waits_raises_there(
    daemon: Daemon, attempt: int
) -> None:
    client = Client.connect(daemon.socket)
    e = _closed_while_blocked(lambda: client.wait(None), client.close, settle=attempt % 2 == 0)
    assert isinstance(e, NotConnected), e
    assert client.closed
    with pytest.raises(NotConnected):
        client.wait(0)
    client.close()  # idempotent


def test_closing_a_client_while_another_thread_is_in_submit_and_wait(daemon: Daemon) -> None:
    for attempt in range(6):
        client = Client.connect(daemon.socket)
        t = client.open_tenant("acme")
        # No worker serves chat: the request waits in its queue.
        e = _closed_while_blocked(
            lambda: client.submit_and_wait(t, "chat", [1], max_output_tokens=4), client.close,
            settle=attempt % 2 == 0)
        assert isinstance(e, NotConnected), e


def test_closing_a_client_while_threads_submit_and_poll(daemon: Daemon) -> None:
    for _ in range(5):
        client = Client.connect(daemon.socket)
        t = client.open_tenant("acme")
        stop = threading.Event()
        errors: list[BaseException] = []

        def busy() -> None:
            try:
                while not stop.is_set():
                    client.submit(t, "embed", [1], max_output_tokens=0)
                    client.poll()
            except NotConnected:
                return
            except FairschedError as e:  # RingFull and the like: not what this is about
                if not stop.is_set():
                    errors.append(e)

        threads = [threading.Thread(target=busy) for _ in range(4)]
        for th in threads:
            th.start()
        client.close()
        stop.set()
        for th in threads:
            th.join(10)
            assert not th.is_alive()
        assert not [e for e in errors if not isinstance(e, FairschedError)]


@pytest.mark.parametrize("attempt", range(5))
def test_closing_a_worker_while_another_thread_waits_raises_there(
    daemon: Daemon, attempt: int
) -> None:
    worker = Worker.connect(daemon.socket, "chat")
    e = _closed_while_blocked(lambda: worker.wait(None), worker.close, settle=attempt % 2 == 0)
    assert isinstance(e, NotConnected), e
    with pytest.raises(NotConnected):
        worker.poll()


# -- fork ----------------------------------------------------------------------

def _run_script(body: str, socket: str) -> subprocess.CompletedProcess[str]:
    code = "import os, sys, gc\nimport fairsched\nSOCKET = sys.argv[1]\n" + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code, socket], capture_output=True, text=True,
                          timeout=60, env=python_env(), cwd=str(REPO))


def test_a_forked_child_that_exits_normally_leaves_the_parents_client_alone(
    daemon: Daemon,
) -> None:
    # A real program: the child returns from its work and the interpreter
    # exits normally, running every finaliser (the inherited Client's too).
    out = _run_script(
        """
        client = fairsched.Client.connect(SOCKET)
        t = client.open_tenant("acme")
        for _ in range(3):
            pid = os.fork()
            if pid == 0:
                sys.exit(0)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, status
            c = client.submit_and_wait(t, "embed", [1], max_output_tokens=0, wait_timeout=10)
            print(c.status.name, client.connected)
        """,
        daemon.socket,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["OK", "True"] * 3, out.stdout + out.stderr


def test_a_forked_child_that_drops_or_closes_an_inherited_client_leaves_the_parent_alone(
    daemon: Daemon,
) -> None:
    # The parent's only references, so that the child can drop them.
    held: list[object] = [Client.connect(daemon.socket), Worker.connect(daemon.socket, "chat")]
    client, worker = held
    assert isinstance(client, Client) and isinstance(worker, Worker)
    t = client.open_tenant("acme")
    for how in ("drop", "close"):
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 0
            try:
                if how == "close":
                    client.close()
                    worker.close()
                else:
                    del client, worker
                    held.clear()
                    gc.collect()
            except BaseException:  # noqa: BLE001
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert client.connected and worker.connected, how
        c = client.submit_and_wait(t, "embed", [1], max_output_tokens=0, wait_timeout=10)
        assert c.status == Status.OK, how
        worker.set_capacity(1, 1000)
    client.close()
    worker.close()


def test_a_forked_child_gets_a_clear_error_using_an_inherited_client(daemon: Daemon) -> None:
    client = Client.connect(daemon.socket)
    t = client.open_tenant("acme")
    worker = Worker.connect(daemon.socket, "chat")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        lines = []
        for name, call in [
            ("submit", lambda: client.submit(t, "embed", [1], max_output_tokens=0)),
            ("poll", lambda: client.poll()),
            ("wait", lambda: client.wait(0)),
            ("open_tenant", lambda: client.open_tenant("other")),
            ("worker.poll", lambda: worker.poll()),
            ("worker.set_capacity", lambda: worker.set_capacity(1, 1)),
        ]:
            try:
                call()
                lines.append(f"{name}: no error")
            except NotConnected as e:
                lines.append(f"{name}: NotConnected {'fork' in str(e)}")
            except BaseException as e:  # noqa: BLE001
                lines.append(f"{name}: {type(e).__name__} {e}")
        lines.append(f"connected: {client.connected} {worker.connected}")
        os.write(w, "\n".join(lines).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        report = f.read().splitlines()
    os.waitpid(pid, 0)
    assert report == [
        "submit: NotConnected True",
        "poll: NotConnected True",
        "wait: NotConnected True",
        "open_tenant: NotConnected True",
        "worker.poll: NotConnected True",
        "worker.set_capacity: NotConnected True",
        "connected: False False",
    ], report
    # The parent's are untouched.
    c = client.submit_and_wait(t, "embed", [1], max_output_tokens=0, wait_timeout=10)
    assert c.status == Status.OK
    assert worker.connected
    client.close()
    worker.close()
