"""examples/python_frontend.py (the frontend docs/python.md shows) in front of
a daemon and the Python reference engine, driven over loopback HTTP."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import sys

import pytest

from conftest import REPO, Daemon, Process, reference_tokens, wait_until

FRONTEND = REPO / "examples" / "python_frontend.py"


@pytest.fixture
def frontend(daemon: Daemon):  # type: ignore[no-untyped-def]
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    p = Process([sys.executable, str(FRONTEND), "--socket", daemon.socket, "--port", "0",
                 "--key", "sk-acme=acme", "--key", "sk-daily=daily"],
                daemon.dir / "frontend.log", env)
    daemon.children.append(p)
    found: list[int] = []

    def listening() -> bool:
        assert p.alive(), p.output()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", p.output())
        if m:
            found.append(int(m.group(1)))
        return bool(m)

    wait_until(listening, 20, "the frontend to listen")
    yield found[0]
    p.stop(signal.SIGKILL)


def post(port: int, key: str, body: dict) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def events(data: bytes) -> list[object]:
    out: list[object] = []
    for block in data.decode().split("\n\n"):
        if block.startswith("data: "):
            payload = block[len("data: "):]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def test_the_frontend_streams_the_reference_tokens_as_events(daemon: Daemon, frontend: int) -> None:
    daemon.python_engine()
    status, headers, data = post(frontend, "sk-acme",
                                 {"prompt": [5, 6, 7], "max_tokens": 12, "stream": True})
    assert status == 200 and headers["content-type"] == "text/event-stream"
    evs = events(data)
    assert evs[-1] == "[DONE]"
    final = evs[-2]
    assert isinstance(final, dict) and final["status"] == "OK"
    assert final["usage"] == {"prompt_tokens": 3, "completion_tokens": 12}
    tokens = [t for e in evs[:-2] for t in e["tokens"]]  # type: ignore[index]
    assert tokens == reference_tokens([5, 6, 7], 12)


def test_the_frontend_answers_without_streaming_and_maps_rejections(
    daemon: Daemon, frontend: int
) -> None:
    daemon.python_engine()
    status, _, data = post(frontend, "sk-acme", {"prompt": [1], "max_tokens": 4})
    assert status == 200
    assert json.loads(data)["tokens"] == reference_tokens([1], 4)

    status, _, data = post(frontend, "sk-nobody", {"prompt": [1], "max_tokens": 4})
    assert status == 401

    # "daily" may make one chat request a day: the second is 429 with the headers.
    assert post(frontend, "sk-daily", {"prompt": [1], "max_tokens": 1})[0] == 200
    status, headers, data = post(frontend, "sk-daily",
                                 {"prompt": [1], "max_tokens": 1, "stream": True})
    assert status == 429
    assert int(headers["retry-after"]) > 3600 and int(headers["retry-after-ms"]) > 3_600_000
    assert json.loads(data)["status"] == "RATE_LIMITED"

    status, _, data = post(frontend, "sk-acme", {"prompt": [-1], "max_tokens": 1})
    assert status == 400 and "INVALID_ARGUMENT" in json.loads(data)["error"]


def test_a_caller_that_hangs_up_gets_its_request_cancelled(daemon: Daemon, frontend: int) -> None:
    engine = daemon.python_engine("--step-us", "20000")  # 4000 tokens would take 80 s
    body = json.dumps({"prompt": [1], "max_tokens": 4000, "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", frontend), timeout=20)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-acme\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while b"tokens" not in got:
        chunk = s.recv(4096)
        assert chunk, "the frontend closed before the first token"
        got += chunk
    s.close()
    # The frontend notices the hang-up at its next write and cancels; the
    # engine gets the abort and acknowledges it with its finish.
    def acknowledged() -> bool:
        workers = daemon.status()["workers"]
        return len(workers) == 1 and workers[0]["running"] == 0 and workers[0]["finished"] == 1

    wait_until(acknowledged, 20, "the engine to finish the abandoned request")
    assert engine.stop(signal.SIGTERM) == 0
    m = re.search(r"(\d+) tokens, (\d+) finished, (\d+) aborted", engine.output())
    assert m and (int(m.group(2)), int(m.group(3))) == (0, 1), engine.output()
    assert int(m.group(1)) < 4000

def test_docs_python_md_shows_this_very_frontend() -> None:
    doc = (REPO / "docs" / "python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
    assert FRONTEND.read_text() in blocks, "docs/python.md's frontend differs from the example"
