"""Bad arguments raise clear exceptions — the library's error name and
message, or a TypeError naming the argument — and lose nothing: the client
keeps working, and a refused request gets no completion."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, Daemon, run
from fairsched import (
    AsyncClient,
    Client,
    ConnectFailed,
    FairschedError,
    InvalidArgument,
    NotConnected,
    PromptTooLarge,
    Refused,
    Status,
    Tenant,
    UnknownEndpoint,
    UnknownTenant,
    Worker,
)


def test_connect_to_a_missing_socket_names_the_path(tmp_path: Path) -> None:
    path = str(tmp_path / "nobody.sock")
    with pytest.raises(ConnectFailed) as e:
        Client.connect(path)
    assert e.value.name == "CONNECT_FAILED" and path in e.value.message
    assert str(e.value).startswith("CONNECT_FAILED: ")


def test_a_bad_client_name_is_refused_before_connecting(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument) as e:
        Client.connect(str(tmp_path / "x.sock"), name="has space")
    assert "name" in e.value.message


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        (dict(prompt=[-1]), InvalidArgument, "2**32"),
        (dict(prompt=[2**32]), InvalidArgument, "2**32"),
        (dict(prompt="hello"), TypeError, "token ids"),
        (dict(prompt=[1.5]), TypeError, "int"),
        (dict(prompt=[1], max_output_tokens=-1), InvalidArgument, "max_output_tokens"),
        (dict(prompt=[1], max_output_tokens=2**32), InvalidArgument, "max_output_tokens"),
        (dict(prompt=[1], max_output_tokens="4"), TypeError, "max_output_tokens"),
        (dict(prompt=[1], priority=2**31), InvalidArgument, "priority"),
        (dict(prompt=[1], tag=-1), InvalidArgument, "tag"),
        (dict(prompt=[1], timeout=-1.0), InvalidArgument, "timeout"),
        (dict(prompt=[1], timeout=0), InvalidArgument, "timeout"),
        (dict(prompt=[1], timeout="soon"), TypeError, "timeout"),
        (dict(prompt=[1], deadline=0.0), InvalidArgument, "deadline"),
        (dict(prompt=[1], params=b"x" * 4097), InvalidArgument, "4096"),
        (dict(prompt=[1], params=12), TypeError, "params"),
        (dict(prompt=[1], prompt_token_count=5), InvalidArgument, "prompt_token_count"),
        (dict(prompt=[1], endpoint="nope"), UnknownEndpoint, "nope"),
        (dict(prompt=[1], endpoint=7), TypeError, "endpoint"),
        (dict(prompt=list(range(20000))), PromptTooLarge, ""),
    ],
)
def test_a_bad_submit_raises_clearly_and_loses_nothing(
    daemon: Daemon, kwargs: dict, exc: type, words: str
) -> None:
    with Client.connect(daemon.socket) as client:
        t = client.open_tenant("acme")
        args = dict(endpoint="embed", max_output_tokens=0)
        args.update(kwargs)
        endpoint = args.pop("endpoint")
        prompt = args.pop("prompt")
        with pytest.raises(exc) as e:
            client.submit(t, endpoint, prompt, **args)
        assert words in str(e.value)
        if isinstance(e.value, FairschedError):
            assert str(e.value).startswith(e.value.name + ": ")
        # The client is intact and the refused request left no completion.
        rid = client.submit(t, "embed", [1, 2], max_output_tokens=0, tag=77)
        got = []
        while not got:
            assert client.wait(10), "no completion for a good request after a refused one"
            got = client.poll()
        assert [(c.request_id, c.tag, c.status) for c in got] == [(rid, 77, Status.OK)]
        assert client.wait(0.1) is False and client.poll() == []


def test_a_tenant_handle_not_opened_on_this_client_is_unknown(daemon: Daemon) -> None:
    with Client.connect(daemon.socket) as client:
        client.open_tenant("acme")
        with pytest.raises(UnknownTenant):
            client.submit(Tenant("ghost", 5), "embed", [1], max_output_tokens=0)
        with pytest.raises(TypeError, match="open_tenant"):
            client.submit("acme", "embed", [1], max_output_tokens=0)  # type: ignore[arg-type]


def test_bad_tenant_and_tier_names_carry_the_librarys_reason(daemon: Daemon) -> None:
    with Client.connect(daemon.socket) as client:
        with pytest.raises(InvalidArgument) as e:
            client.open_tenant("not a name")
        assert "tenant" in e.value.message
        with pytest.raises(InvalidArgument):
            client.open_tenant("x" * 64)
        with pytest.raises(InvalidArgument) as e:
            client.open_tenant("fine", tier="bad tier")
        assert "tier" in e.value.message
        assert client.open_tenant("fine").name == "fine"


def test_a_nul_inside_any_string_is_refused_not_cut_short(daemon: Daemon) -> None:
    # The C library would stop at the NUL: "e1\x00evil" would open "e1",
    # and the socket path would name another socket.
    with pytest.raises(InvalidArgument, match="NUL"):
        Client.connect(daemon.socket + "\x00x")
    with pytest.raises(InvalidArgument, match="NUL"):
        Client.connect(daemon.socket, name="py\x00evil")
    with Client.connect(daemon.socket) as client:
        e1 = client.open_tenant("e1")
        for bad in ("e1\x00evil", "\x00"):
            with pytest.raises(InvalidArgument, match="NUL"):
                client.open_tenant(bad)
        with pytest.raises(InvalidArgument, match="NUL"):
            client.open_tenants(["ok", "e1\x00evil"])
        with pytest.raises(InvalidArgument, match="NUL"):
            client.open_tenant("fine", tier="paid\x00")
        with pytest.raises(InvalidArgument, match="NUL"):
            client.submit(e1, "embed\x00x", [1], max_output_tokens=0)
        assert client.open_tenant("e1") == e1, "the client goes on"
    with pytest.raises(InvalidArgument, match="NUL"):
        Worker.connect(daemon.socket, "chat\x00x")
    with pytest.raises(InvalidArgument, match="NUL"):
        Worker.connect(daemon.socket + "\x00", "chat")


def test_cancel_of_a_request_that_is_not_outstanding(daemon: Daemon) -> None:
    with Client.connect(daemon.socket) as client:
        with pytest.raises(InvalidArgument):
            client.cancel(123456)
        with pytest.raises(InvalidArgument):
            client.cancel(-1)


def test_a_closed_client_says_so(daemon: Daemon) -> None:
    client = Client.connect(daemon.socket)
    t = client.open_tenant("acme")
    client.close()
    client.close()
    assert not client.connected and client.closed
    for call in (lambda: client.submit(t, "embed", [1], max_output_tokens=0),
                 client.poll, lambda: client.wait(0.1), lambda: client.open_tenant("x")):
        with pytest.raises(NotConnected, match="closed"):
            call()


def test_async_submit_errors_leave_no_request_behind(daemon: Daemon) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(daemon.socket) as client:
            t = await client.open_tenant("acme")
            with pytest.raises(InvalidArgument):
                client.submit(t, "embed", [-5], max_output_tokens=0)
            with pytest.raises(UnknownEndpoint):
                client.submit(t, "nope", [1], max_output_tokens=0)
            assert client.outstanding == 0
            ok = await client.submit(t, "embed", [1], max_output_tokens=0)
            assert ok.status == Status.OK and client.unclaimed == 0

    run(main(), 20)


def test_worker_argument_errors(daemon: Daemon) -> None:
    with pytest.raises(InvalidArgument, match="endpoint"):
        Worker.connect(daemon.socket, "")
    with pytest.raises(Refused):
        Worker.connect(daemon.socket, "embed")  # not executor = "worker"
    with Worker.connect(daemon.socket, "chat", name="py-args") as w:
        with pytest.raises(InvalidArgument):
            w.emit(1, [])
        with pytest.raises(InvalidArgument, match="2\\*\\*32"):
            w.emit(1, [-1])
        with pytest.raises(InvalidArgument, match="not a fairsched Status"):
            w.finish(1, 99, 0)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            w.finish(1, "OK", 0)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="free_sequences"):
            w.set_capacity(-1, 0)
        assert w.connected
        w.set_capacity(1, 1000)


def test_a_library_that_does_not_load_is_reported_with_the_path() -> None:
    env = dict(os.environ, FAIRSCHED_LIBRARY="/nonexistent/libfairsched.so.0",
               PYTHONPATH=str(REPO / "python"))
    code = ("import fairsched\n"
            "try:\n    fairsched.Client.connect('/tmp/x')\n"
            "except fairsched.LibraryNotFound as e:\n    print('LNF', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("LNF $FAIRSCHED_LIBRARY=/nonexistent/libfairsched.so.0")
