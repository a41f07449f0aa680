"""Real processes for the gateway's tests: fairschedd, the fake upstream
(fake_upstream.py) and fairsched-gateway, each on private sockets or free
ports, every wait bounded. The binaries come from $FAIRSCHED_BIN_DIR (ctest
sets it) or build/bin of this checkout. What the package's tests use too
(processes, waits, the [daemon] section) is python/tests/fairsched_testing.py."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Optional

import pytest

HERE = Path(__file__).resolve().parent
# Appended, not prepended: "conftest" stays this file for whoever imports it.
sys.path.append(str(HERE.parents[1] / "python" / "tests"))

from fairsched_testing import (  # noqa: E402, F401 (pytest_runtest_makereport: a hook)
    BIN,
    SLOW,
    Process,
    daemon_section,
    pytest_runtest_makereport,
    wait_until,
)

KEYS = {
    "alice": ("sk-alice-0123456789", "alice", ""),
    "bob": ("sk-bob-0123456789", "bob", ""),
    "limited": ("sk-limited-0123456789", "limited", ""),
    "tiny": ("sk-tiny-0123456789", "tiny", ""),
    "tokened": ("sk-tokened-0123456789", "tokened", ""),
    "modelsonly": ("sk-models-0123456789", "alice", 'routes = ["models"]\n'),
}


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def daemon_toml(socket: str) -> str:
    return (
        daemon_section(socket) +
        "[endpoints.chat]\nexecutor = \"worker\"\nmax_batch_tokens = 65536\n"
        "max_output_tokens = 4096\nbatch_timeout_ms = 60000\n"
        "[endpoints.chat.worker]\nmax_sequences = 256\n"
        '[tenants.limited]\ntier = "paid"\n[tenants.limited.limits]\nchat = ["2 requests/minute"]\n'
        '[tenants.tiny]\ntier = "paid"\nqueue_limit = 1\n'
        '[tenants.tokened]\ntier = "paid"\n[tenants.tokened.limits]\nchat = ["100000 tokens/minute"]\n'
        f'[[clients]]\nname = "gateway"\nuids = [{os.getuid()}]\ntenants = ["*"]\n'
        'endpoints = ["*"]\nworkers = ["chat"]\nassign_tiers = ["*"]\nadmin = true\n'
    )


def gateway_toml(socket: str, daemon_config: Path, upstream_port, **over) -> str:
    """The gateway's TOML; `upstream_port` an int ([upstream]) or a list of
    ports ([[upstreams]] named r0, r1, ...)."""
    g = {
        "listen": '"127.0.0.1:0"', "socket": f'"{socket}"', "endpoint": '"chat"',
        "daemon_config": f'"{daemon_config}"', "log_level": '"debug"',
        "max_body_bytes": 65536, "header_timeout_ms": 2000, "body_timeout_ms": 2000,
        "idle_timeout_ms": 10000, "write_timeout_ms": 5000, "request_timeout_ms": 30000,
        "default_max_tokens": 16,
    }
    u = {
        "max_sequences": 8, "max_tokens": 1000000,
        "connect_timeout_ms": 1000, "response_timeout_ms": int(1500 * SLOW),
        "idle_timeout_ms": int(1500 * SLOW),
    }
    for k, v in over.items():
        if k.startswith("upstream_"):
            u[k[len("upstream_"):]] = v
        else:
            g[k] = v
    text = "[gateway]\n" + "".join(f"{k} = {v}\n" for k, v in g.items())
    body = "".join(f"{k} = {v}\n" for k, v in u.items())
    if isinstance(upstream_port, int):
        text += f'[upstream]\nurl = "http://127.0.0.1:{upstream_port}"\n' + body
    else:
        for i, port in enumerate(upstream_port):
            text += (f'[[upstreams]]\nname = "r{i}"\nurl = "http://127.0.0.1:{port}"\n' + body)
    for name, (key, tenant, extra) in KEYS.items():
        text += f'[keys.{name}]\nsha256 = "{sha(key)}"\ntenant = "{tenant}"\n{extra}'
    return text


class Stack:
    """fairschedd + fake upstream + fairsched-gateway in `dir`."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir
        self.socket = str(dir / "fairsched.sock")
        self.daemon_config = dir / "fairsched.toml"
        self.daemon_config.write_text(daemon_toml(self.socket))
        self.gateway_config = dir / "gateway.toml"
        self.procs: list[Process] = []
        self.daemon: Optional[Process] = None
        self.upstream: Optional[Process] = None
        self.gateway: Optional[Process] = None
        self.upstream_port = 0
        self.replicas: list[tuple[Process, int]] = []
        self.gateway_over: dict = {}
        self.port = 0

    def start_upstream(self, args: tuple[str, ...] = (), port: int = 0) -> tuple[Process, int]:
        """One more fake upstream (on `port`, or a free one): its process and port."""
        p = self._spawn([sys.executable, str(HERE / "fake_upstream.py"), "--port", str(port),
                         *args], "upstream")
        wait_until(lambda: "PORT" in p.output() or not p.alive(), 10, "the fake upstream")
        assert p.alive(), p.output()
        return p, int(re.search(r"PORT (\d+)", p.output()).group(1))

    def start(self, upstream_args: tuple[str, ...] = (), upstream: bool = True,
              replicas: int = 0, **gateway_over):
        """`replicas` > 0: that many fake upstreams as [[upstreams]] r0, r1, ...
        (self.replicas: their (process, port))."""
        self.daemon = self._spawn([str(BIN / "fairschedd"), "--config", str(self.daemon_config)],
                                  "fairschedd")
        wait_until(lambda: os.path.exists(self.socket) or not self.daemon.alive(), 15,
                   "fairschedd's socket")
        assert self.daemon.alive(), self.daemon.output()
        ports = None
        if replicas > 0:
            self.replicas = [self.start_upstream(upstream_args) for _ in range(replicas)]
            self.upstream, self.upstream_port = self.replicas[0]
            ports = [port for _, port in self.replicas]
        elif upstream:
            self.upstream, self.upstream_port = self.start_upstream(upstream_args)
        else:
            self.upstream_port = free_port()
        self.gateway_over = gateway_over
        self.gateway_config.write_text(
            gateway_toml(self.socket, self.daemon_config, ports or self.upstream_port,
                         **gateway_over))
        self.start_gateway()
        return self

    def start_gateway(self) -> None:
        self.gateway = self._spawn(
            [str(BIN / "fairsched-gateway"), "--config", str(self.gateway_config)], "gateway")
        pat = re.compile(r"listening on [0-9.]+:(\d+)")
        wait_until(lambda: pat.search(self.gateway.output()) or not self.gateway.alive(), 15,
                   "the gateway to listen")
        assert self.gateway.alive(), self.gateway.output()
        self.port = int(pat.search(self.gateway.output()).group(1))

    def _spawn(self, argv: list[str], name: str) -> Process:
        p = Process(argv, self.dir / f"{name}.{len(self.procs)}.log")
        self.procs.append(p)
        return p

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop(signal.SIGKILL)

    def logs(self) -> str:
        return "\n".join(f"--- {f.name}\n{f.read_text(errors='replace')[-4000:]}"
                         for f in sorted(self.dir.glob("*.log")))

    # --- HTTP ---------------------------------------------------------------
    def conn(self, timeout: float = 10.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout * SLOW)

    def request(self, method: str, path: str, body=None, key: Optional[str] = "alice",
                headers: Optional[dict] = None, timeout: float = 10.0):
        """(status, headers dict lower-cased, body bytes) on a fresh connection."""
        c = self.conn(timeout)
        h = dict(headers or {})
        if key is not None:
            h["Authorization"] = f"Bearer {KEYS[key][0]}"
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        if data is not None:
            h.setdefault("Content-Type", "application/json")
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        c.close()
        return out

    def upstream_stats(self, port: Optional[int] = None) -> dict:
        c = http.client.HTTPConnection("127.0.0.1", port or self.upstream_port, timeout=5)
        c.request("GET", "/stats")
        stats = json.loads(c.getresponse().read())
        c.close()
        return stats

    def ctl(self, *args: str) -> str:
        out = subprocess.run([str(BIN / "fairschedctl"), "--socket", self.socket, *args],
                             capture_output=True, text=True, timeout=10)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def status(self) -> dict:
        """`fairschedctl status --json` of the daemon."""
        return json.loads(self.ctl("status", "--json"))

    def queued(self, tenant: str) -> int:
        """Requests of ``tenant`` queued in the daemon now (`fairschedctl tenants`)."""
        rows = json.loads(self.ctl("tenants", "--tenant", tenant, "--json"))["tenants"]
        return sum(r["queued"] for r in rows)

    def tenant_counts(self, tenant: str) -> dict:
        """The daemon's counts of ``tenant`` on every endpoint, summed:
        completed, cancelled, expired, queued, in_flight."""
        rows = json.loads(self.ctl("tenants", "--tenant", tenant, "--json"))["tenants"]
        keys = ("completed", "cancelled", "expired", "queued", "in_flight")
        return {k: sum(r[k] for r in rows) for k in keys}

    def assigned(self) -> int:
        """Requests the daemon has assigned to the gateway (its worker) so far."""
        return sum(w["assigned"] for w in self.status()["workers"])

    def finals_taken(self) -> int:
        """The daemon's final completions the gateway has taken so far, from
        its debug log ("request N completed ..."; the stack's log_level is
        "debug" unless a test sets another). The gateway logs one as it
        settles that request's x-ratelimit-* reservation, under the lock
        every later request takes for its own: once counted here, the next
        request's headers include the settlement."""
        return len(re.findall(r"request \d+ completed ", self.gateway.output()))


def free_port() -> int:
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def sse_events(body: bytes) -> list[str]:
    return [line[len("data: "):] for line in body.decode().split("\n") if line.startswith("data: ")]


@pytest.fixture
def stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    for binary in ("fairschedd", "fairsched-gateway", "fairschedctl"):
        if not (BIN / binary).exists():
            pytest.fail(f"{BIN / binary} is not built (cmake --build build --target {binary})")
    d = Path(tempfile.mkdtemp(prefix="fsgw-", dir="/tmp"))
    s = Stack(d)
    try:
        yield s
    finally:
        s.stop()
        logs = s.logs()
        whole = "\n".join(f.read_text(errors="replace") for f in d.glob("*.log"))
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            print(logs)
        shutil.rmtree(d, ignore_errors=True)
    # A sanitizer's report in any process fails the test that caused it.
    found = re.search(r"(ThreadSanitizer|AddressSanitizer|LeakSanitizer|runtime error):.*", whole)
    if found:
        print(logs)
        pytest.fail(f"a sanitizer reported: {found.group(0)}")
