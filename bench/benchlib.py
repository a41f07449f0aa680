"""What the Python benches (gateway_bench.py, python_asyncio_bench.py)
share: the repository, their common options --build (the build tree whose
bin/ holds the binaries) and --json (where the result also goes), and the
writing of that result."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]


def arguments(doc: str) -> argparse.ArgumentParser:
    """A parser described by the first line of ``doc`` (the bench's
    docstring), with --build and --json; the bench adds its own options."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--build", default=str(REPO / "build"),
                   help="the build tree (its bin/ holds the binaries)")
    p.add_argument("--json", help="write the result here too")
    return p


def write_json(path: Optional[str], doc: dict[str, Any]) -> None:
    """Writes ``doc`` to ``path`` (indented, a final newline); nothing without a path."""
    if path:
        Path(path).write_text(json.dumps(doc, indent=2) + "\n")
