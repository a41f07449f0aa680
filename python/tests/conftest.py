"""A real fairschedd (and workers) for the package's tests.

Paths: $FAIRSCHED_BIN_DIR (ctest sets it) or build/bin of this checkout for
the binaries; the package is imported from python/ and finds libfairsched
through $FAIRSCHED_LIBRARY or the checkout's build tree. Every wait is
bounded; the daemon listens on a unix socket in a private temp directory.
What the gateway's tests use too is in fairsched_testing.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Optional

import pytest

from fairsched_testing import (  # noqa: F401 (pytest_runtest_makereport: a hook)
    BIN,
    REPO,
    Process,
    daemon_section,
    pytest_runtest_makereport,
    python_env,
    seed,
    wait_until,
)

sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "examples"))

import fairsched  # noqa: E402

ENGINE = REPO / "examples" / "python_reference_engine.py"
U32 = 0xFFFFFFFF


def reference_token(prompt: list[int], j: int) -> int:
    base = prompt[j % len(prompt)] if prompt else 0
    return (base + j + 1) & U32


def reference_tokens(prompt: list[int], n: int) -> list[int]:
    return [reference_token(prompt, j) for j in range(n)]


def config_text(socket: str, extra: str = "", chat: str = "", chat_worker: str = "") -> str:
    """The tests' config; `chat` and `chat_worker` add keys to [endpoints.chat]
    and [endpoints.chat.worker]."""
    return (
        daemon_section(socket) +
        '[endpoints.chat]\nexecutor = "worker"\nmax_batch_tokens = 65536\n'
        "max_output_tokens = 4096\nbatch_timeout_ms = 60000\n" + chat +
        "[endpoints.chat.worker]\nmax_sequences = 256\n" + chat_worker +
        "[endpoints.chat.engine]\nmax_sequences = 64\nstep_us = 100.0\ndecode_token_us = 1.0\n"
        "[endpoints.embed]\nmax_wait_us = 100\n"
        '[tenants.limited]\n[tenants.limited.limits]\nembed = ["2 requests/second"]\n'
        '[tenants.daily]\n[tenants.daily.limits]\nembed = ["1 request/day"]\n'
        'chat = ["1 request/day"]\n'
        f'[[clients]]\nname = "tests"\nuids = [{os.getuid()}]\ntenants = ["*"]\n'
        'endpoints = ["*"]\nworkers = ["chat"]\nadmin = true\n' + extra
    )


class Daemon:
    """fairschedd on a socket in `dir`, started with config_text()."""

    def __init__(self, dir: Path, extra_config: str = "", chat: str = "",
                 chat_worker: str = "") -> None:
        self.dir = dir
        self.socket = str(dir / "fairsched.sock")
        self.config = dir / "fairsched.toml"
        self.config.write_text(config_text(self.socket, extra_config, chat, chat_worker))
        self.process: Optional[Process] = None
        self.children: list[Process] = []
        self.starts = 0

    def start(self) -> None:
        assert self.process is None or not self.process.alive()
        self.starts += 1
        self.process = Process(
            [str(BIN / "fairschedd"), "--config", str(self.config)],
            self.dir / f"fairschedd.{self.starts}.log",
        )

        def up() -> bool:
            assert self.process is not None
            if not self.process.alive():
                raise AssertionError(f"fairschedd exited: {self.process.output()}")
            try:
                fairsched.Client.connect(self.socket, connect_timeout=1.0).close()
                return True
            except fairsched.FairschedError:
                return False

        wait_until(up, 15.0, "fairschedd to accept connections")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None:
            self.process.stop(sig)

    def restart(self) -> None:
        self.stop()
        self.start()

    def cpp_worker(self, endpoint: str = "chat") -> Process:
        p = Process(
            [str(BIN / "fairsched-worker"), "--socket", self.socket, "--endpoint", endpoint,
             "--config", str(self.config)],
            self.dir / f"fairsched-worker.{len(self.children)}.log",
        )
        self.children.append(p)
        return p

    def python_engine(self, *args: str, endpoint: str = "chat") -> Process:
        p = Process(
            [sys.executable, str(ENGINE), "--socket", self.socket, "--endpoint", endpoint, *args],
            self.dir / f"python-engine.{len(self.children)}.log",
            python_env(),
        )
        self.children.append(p)
        return p

    def status(self) -> dict:
        """`fairschedctl status --json` of this daemon."""
        out = subprocess.run(
            [str(BIN / "fairschedctl"), "--socket", self.socket, "status", "--json"],
            capture_output=True, text=True, timeout=10,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def logs(self) -> str:
        return "\n".join(
            f"--- {f.name}\n{f.read_text(errors='replace')}" for f in sorted(self.dir.glob("*.log"))
        )


@pytest.fixture
def tmpdir_short() -> Iterator[Path]:
    # A unix socket path must fit in 108 bytes: a short directory under /tmp.
    d = Path(tempfile.mkdtemp(prefix="fsp-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


PREEMPTING = {
    "chat": 'fairness = "recent"\n',
    "chat_worker": "preemption = true\nmin_progress_tokens = 4\nmax_preemptions_per_s = 100.0\n",
}


@pytest.fixture
def daemon(tmpdir_short: Path, request: pytest.FixtureRequest) -> Iterator[Daemon]:
    for binary in ("fairschedd", "fairsched-worker"):
        if not (BIN / binary).exists():
            pytest.fail(f"{BIN / binary} is not built (cmake --build build --target {binary})")
    # A test marked @pytest.mark.preempting gets an endpoint that preempts;
    # one marked @pytest.mark.prefix_routing, one that routes by prefix.
    keys = PREEMPTING if request.node.get_closest_marker("preempting") else {}
    if request.node.get_closest_marker("prefix_routing"):
        keys = {"chat_worker": 'routing = "prefix"\n'}
    d = Daemon(tmpdir_short, **keys)
    d.start()
    yield d
    for child in d.children:
        child.stop(signal.SIGKILL)
    d.stop(signal.SIGKILL)
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(d.logs())


def run(coro, timeout: float):  # type: ignore[no-untyped-def]
    """Runs a coroutine in a fresh event loop, failing after `timeout` seconds."""
    import asyncio

    async def bounded():  # type: ignore[no-untyped-def]
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "preempting: the daemon's chat endpoint preempts")
    config.addinivalue_line("markers", "prefix_routing: the daemon's chat endpoint routes by prefix")
