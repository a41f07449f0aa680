"""What the Python tests share: python/tests (conftest.py) and the gateway's
end-to-end tests (tests/gateway/conftest.py, which puts this folder on
sys.path). Child processes with a log file, bounded waits on a condition,
the one test seed of the project ($FAIRSCHED_SEED, as the C++ tests'
tests/support/seeded_rng.hpp), the [daemon] section of a test config, and
the report hook that lets a fixture print logs only when its test failed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterator, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
# The binaries: $FAIRSCHED_BIN_DIR (ctest sets it) or build/bin of this checkout.
BIN = Path(os.environ.get("FAIRSCHED_BIN_DIR", REPO / "build" / "bin"))
# Sanitized builds run several times slower: wait_until stretches its time boxes.
SLOW = 3.0 if os.environ.get("FAIRSCHED_SANITIZED") else 1.0


def wait_until(pred: Callable[[], object], timeout: float, what: str) -> None:
    """Returns once ``pred()`` is true; fails, naming ``what`` was awaited,
    after ``timeout`` seconds (times SLOW). ``pred`` may itself raise an
    AssertionError to fail at once (a process that died meanwhile)."""
    limit = timeout * SLOW
    deadline = time.monotonic() + limit
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit:.1f} s waiting for {what}")
        time.sleep(0.01)


def seed() -> int:
    """A test's random seed: $FAIRSCHED_SEED (unset or empty: a fresh one);
    printed, so that the run can be replayed."""
    env = os.environ.get("FAIRSCHED_SEED", "")
    value = int(env) if env else random.randrange(2**32)
    print(f"seed {value} (FAIRSCHED_SEED={value} reproduces it)")
    return value


def python_env() -> dict[str, str]:
    """This environment with the package of this checkout (python/) first on
    PYTHONPATH: for Python children (examples, workers)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "python")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    return env


def daemon_section(socket: str) -> str:
    """The [daemon] section of the tests' configs, and the one tier "paid";
    $FAIRSCHED_TEST_EVENT_LOOP (epoll, io_uring) picks the event loop."""
    loop = os.environ.get("FAIRSCHED_TEST_EVENT_LOOP", "")
    loop_line = f'event_loop = "{loop}"\n' if loop in ("epoll", "io_uring") else ""
    return (
        f'[daemon]\nsocket = "{socket}"\nsocket_mode = "0600"\nlog_level = "error"\nstate_dir = ""\n'
        f"shutdown_grace_ms = 500\n{loop_line}"
        '[[tiers]]\nname = "paid"\n'
    )


class Process:
    """A child process whose output goes to a log file; killed on stop()."""

    def __init__(self, argv: list[str], log: Path, env: Optional[dict[str, str]] = None) -> None:
        self.argv = argv
        self.log = log
        self._out = open(log, "ab")
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=subprocess.STDOUT, env=env)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, sig: int) -> None:
        if self.alive():
            self.proc.send_signal(sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> Optional[int]:
        """Sends ``sig`` and waits up to ``timeout`` seconds, then kills; the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if not self._out.closed:
            self._out.close()
        return self.proc.returncode

    def output(self) -> str:
        if not self._out.closed:
            self._out.flush()
        return self.log.read_text(errors="replace")


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Import it into a conftest.py: each phase's report lands on the item
    (item.rep_setup, rep_call, rep_teardown), for fixtures that print logs
    when the test failed."""
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, "rep_" + rep.when, rep)
