#!/usr/bin/env python3
"""scripts/gpu_kit_libs.py against kits made here to pass and to fail: a
binary that needs only glibc passes; the plain build's fairschedd (Debian's
spdlog, fmt, liburing, ... and no DT_RPATH) fails naming them, also after
`bundle` copied them in, since it cannot find lib/; the plain build's
libfairsched passes, but a libfairsched needing a library of lib/ fails (the
image's Python loads it without the kit's DT_RPATH); a kit over the size
limit fails.

    gpu_kit_checker_test.py BUILD_DIR     (its bin/fairschedd and lib/libfairsched.so.0)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "scripts" / "gpu_kit_libs.py"


def tool(*args: str) -> tuple[int, str]:
    r = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def kit_with(tmp: Path, name: str, files: dict[str, Path]) -> Path:
    kit = tmp / name
    for rel, src in files.items():
        (kit / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, kit / rel)
    (kit / "lib").mkdir(exist_ok=True)
    return kit


def expect(cond: bool, what: str, out: str) -> None:
    if not cond:
        print(out)
        raise SystemExit(f"FAILED: {what}")
    print(f"ok: {what}")


def main() -> int:
    build = Path(sys.argv[1])
    daemon = build / "bin" / "fairschedd"
    lib = build / "lib" / "libfairsched.so.0"
    true = Path(shutil.which("true") or "/bin/true")
    for p in (daemon, lib):
        if not p.exists():
            raise SystemExit(f"FAILED: {p} is not built")
    with tempfile.TemporaryDirectory(prefix="gpukit-") as t:
        tmp = Path(t)

        kit = kit_with(tmp, "glibc-only", {"bin/true": true})
        rc, out = tool("check", str(kit), "--json", str(tmp / "m.json"))
        expect(rc == 0, "a kit whose binary needs only glibc passes", out)
        m = json.loads((tmp / "m.json").read_text())
        expect(str(m["glibc_required"]).startswith("GLIBC_2."), "it reports the glibc it needs", out)
        expect(m["problems"] == [], "with no problems", out)

        kit = kit_with(tmp, "debian-daemon", {"bin/fairschedd": daemon})
        rc, out = tool("check", str(kit))
        expect(rc == 1, "the plain build's fairschedd fails the check", out)
        for soname in ("libspdlog.so", "libfmt.so", "liburing.so"):
            expect(f"needs {soname}" in out and "not on the image" in out,
                   f"naming {soname} as not on the image", out)

        rc, out = tool("bundle", str(kit))
        expect(rc == 0 and any((kit / "lib").glob("libspdlog.so*")), "bundle copies them in", out)
        rc, out = tool("check", str(kit))
        expect(rc == 1 and "has no DT_RPATH $ORIGIN/../lib" in out,
               "a binary that cannot find lib/ still fails", out)
        expect("outside the kit" in out, "the loader is seen taking them from the system", out)

        if os.environ.get("FAIRSCHED_SANITIZED"):
            # A sanitized build's library needs libasan/libtsan, which no image has.
            print("skip: the plain build's libfairsched (this build is sanitized: "
                  f"{os.environ['FAIRSCHED_SANITIZED']})")
        else:
            kit = kit_with(tmp, "plain-lib", {"lib/libfairsched.so.0": lib})
            rc, out = tool("check", str(kit))
            expect(rc == 0, "the plain build's libfairsched needs only what the image has", out)

        spdlog = next(Path("/usr/lib/x86_64-linux-gnu").glob("libspdlog.so.*.*"), None)
        if spdlog is not None:
            kit = kit_with(tmp, "foreign-lib", {"lib/libfairsched.so.0": spdlog,
                                                "lib/libfmt.so.9": spdlog})
            rc, out = tool("check", str(kit))
            expect(rc == 1 and "libfairsched.so.0: needs libfmt" in out
                   and "only what the image has" in out,
                   "a libfairsched that needs a library of lib/ fails (Python loads it)", out)

        kit = kit_with(tmp, "too-big", {"bin/true": true})
        rc, out = tool("check", str(kit), "--max-mib", "0.001")
        expect(rc == 1 and "over the 0.001 MiB limit" in out, "a kit over the limit fails", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
