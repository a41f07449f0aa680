#!/usr/bin/env python3
"""The GPU kit's shared libraries (docs/gpu.md): copy in what the target image
lacks, then check that the kit needs nothing else.

    gpu_kit_libs.py bundle KIT     copy into KIT/lib every library the kit's
                                   ELF files load that is not on the image
    gpu_kit_libs.py check KIT [--max-mib 64] [--json FILE]
                                   fail (exit 1, naming each) on: a kit over
                                   the size limit; a library neither on the
                                   image nor in KIT/lib; a binary that cannot
                                   find KIT/lib (no DT_RPATH $ORIGIN/../lib);
                                   libfairsched needing more than the image.
                                   Reports the highest GLIBC_ and GLIBCXX_
                                   versions the kit requires.

The image (the lent GPU machine's, docs/gpu.md) has glibc, libstdc++,
libgcc_s and the CUDA driver and runtime, nothing else of ours. The kit
uses the image's libstdc++ and glibc: Debian 12's would need glibc 2.36
(arc4random), newer than some CUDA images have, where the kit's own
binaries need 2.34.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

# What the image provides (sonames).
IMAGE = {
    "linux-vdso.so.1", "ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libpthread.so.0",
    "libdl.so.2", "librt.so.1", "libresolv.so.2", "libutil.so.1",
    "libstdc++.so.6", "libgcc_s.so.1",
    "libcuda.so.1", "libcudart.so.13",
}
# Loaded by processes that are not the kit's own (Python): the image's libraries only.
FOREIGN_LOADED = re.compile(r"^libfairsched\.so")
EXEC_DIRS = ("bin", "tests")
RPATH = "$ORIGIN/../lib"


def is_elf(p: Path) -> bool:
    try:
        with open(p, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def elf_files(kit: Path) -> list[Path]:
    return sorted(p for p in kit.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p))


def readelf(args: list[str], p: Path) -> str:
    r = subprocess.run(["readelf", "-W", *args, str(p)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"readelf {' '.join(args)} {p}: {r.stderr.strip()}")
    return r.stdout


def dynamic(p: Path) -> dict[str, list[str]]:
    """NEEDED, RPATH and RUNPATH of an ELF file."""
    out: dict[str, list[str]] = {"NEEDED": [], "RPATH": [], "RUNPATH": []}
    for line in readelf(["-d"], p).splitlines():
        m = re.search(r"\((NEEDED|RPATH|RUNPATH)\)\s+\S+.*\[(.*)\]", line)
        if m and m.group(1) == "NEEDED":
            out["NEEDED"].append(m.group(2))
        elif m:
            out[m.group(1)] += m.group(2).split(":")
    return out


def version_needs(p: Path) -> set[str]:
    """Every symbol version the file requires (GLIBC_2.34, GLIBCXX_3.4.30, ...)."""
    return set(re.findall(r"Name: ((?:GLIBC|GLIBCXX|CXXABI|GCC)_[0-9.]+)", readelf(["-V"], p)))


def vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("_", 1)[1].split(".") if x.isdigit())


def highest(versions: set[str], prefix: str) -> Optional[str]:
    vs = [v for v in versions if v.startswith(prefix + "_")]
    return max(vs, key=vkey) if vs else None


def ldd(p: Path, search: Optional[Path] = None) -> list[tuple[str, Optional[str]]]:
    """(soname, resolved path or None) of everything p loads, as the loader
    resolves it here, with LD_LIBRARY_PATH ``search`` (the DT_RPATH of the
    binary that loads a library of the kit) or none."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    if search is not None:
        env["LD_LIBRARY_PATH"] = str(search)
    r = subprocess.run(["ldd", str(p)], capture_output=True, text=True, env=env)
    res: list[tuple[str, Optional[str]]] = []
    for line in r.stdout.splitlines():
        line = line.strip()
        m = re.match(r"(\S+) => (not found|(\S+) \(0x[0-9a-f]+\))", line)
        if m:
            res.append((m.group(1), m.group(3)))
            continue
        m = re.match(r"(/\S+) \(0x[0-9a-f]+\)", line)  # the loader itself
        if m:
            res.append((Path(m.group(1)).name, m.group(1)))
    return res


def bundle(kit: Path) -> int:
    lib = kit / "lib"
    lib.mkdir(exist_ok=True)
    copied: dict[str, str] = {}
    pending = elf_files(kit)
    while pending:
        p = pending.pop()
        for soname, path in ldd(p):
            if soname in copied or soname in IMAGE:
                continue
            if (lib / soname).exists():
                continue
            if path is None:
                print(f"gpu-kit: {p.relative_to(kit)} needs {soname}, which is not found here",
                      file=sys.stderr)
                return 1
            shutil.copy2(os.path.realpath(path), lib / soname)
            os.chmod(lib / soname, 0o755)
            copied[soname] = path
            pending.append(lib / soname)
    for soname, path in sorted(copied.items()):
        print(f"gpu-kit: lib/{soname} <- {path}")
    return 0


def check(kit: Path, max_mib: float, json_out: Optional[Path]) -> int:
    problems: list[str] = []
    files = [p for p in kit.rglob("*") if p.is_file() and not p.is_symlink()]
    size = sum(p.stat().st_size for p in files)
    if size >= max_mib * 2**20:
        problems.append(f"the kit is {size / 2**20:.1f} MiB, over the {max_mib:g} MiB limit")
    lib = kit / "lib"
    in_kit = {p.name for p in lib.iterdir()} if lib.is_dir() else set()
    elves = elf_files(kit)
    if not elves:
        problems.append("no ELF files in the kit")
    all_versions: set[str] = set()
    report: dict[str, Any] = {}
    for p in elves:
        rel = str(p.relative_to(kit))
        d = dynamic(p)
        needs = version_needs(p)
        all_versions |= needs
        executable = p.relative_to(kit).parts[0] in EXEC_DIRS
        if executable and d["RUNPATH"]:
            problems.append(f"{rel}: DT_RUNPATH {d['RUNPATH']} (its libraries' own dependencies "
                            f"would not be looked up in lib/: link with --disable-new-dtags)")
        if "" in d["RPATH"] + d["RUNPATH"]:
            problems.append(f"{rel}: an empty DT_RPATH/DT_RUNPATH entry (the working directory)")
        foreign = p.parent == lib and FOREIGN_LOADED.match(p.name) is not None
        for n in d["NEEDED"]:
            if n in IMAGE:
                continue
            if foreign:
                problems.append(f"{rel}: needs {n}; a library other processes load may need "
                                f"only what the image has")
            elif n not in in_kit:
                problems.append(f"{rel}: needs {n}, not on the image, and lib/ has no {n}")
            elif executable and RPATH not in d["RPATH"]:
                problems.append(f"{rel}: needs lib/{n} but has no DT_RPATH {RPATH}")
        # A library of lib/ other than libfairsched is loaded by a binary whose
        # DT_RPATH names lib/.
        in_lib = p.parent == lib and not foreign
        for soname, path in ldd(p, lib if in_lib else None):
            if soname in IMAGE:
                continue
            if path is None:
                problems.append(f"{rel}: the loader does not find {soname}")
            elif not os.path.realpath(path).startswith(os.path.realpath(kit) + os.sep):
                problems.append(f"{rel}: the loader takes {soname} from {path}, outside the kit")
        report[rel] = {"needed": d["NEEDED"], "rpath": d["RPATH"],
                       "glibc": highest(needs, "GLIBC"), "glibcxx": highest(needs, "GLIBCXX")}
    glibc = highest(all_versions, "GLIBC")
    glibcxx = highest(all_versions, "GLIBCXX")
    summary = {
        "kit": str(kit),
        "size_bytes": size,
        "size_mib": round(size / 2**20, 2),
        "limit_mib": max_mib,
        "files": len(files),
        "libraries_copied": sorted(in_kit),
        "glibc_required": glibc,
        "glibcxx_required": glibcxx,
        "elf": report,
        "problems": problems,
    }
    if json_out:
        json_out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"gpu-kit: {kit}: {size / 2**20:.1f} MiB in {len(files)} files (limit {max_mib:g} MiB)")
    print(f"gpu-kit: libraries in lib/: {' '.join(sorted(in_kit)) or '(none)'}")
    print(f"gpu-kit: the image needs glibc with {glibc} and libstdc++ with "
          f"{glibcxx or '(none)'} or newer")
    for pr in problems:
        print(f"gpu-kit: PROBLEM: {pr}")
    print("gpu-kit: check " + ("FAILED" if problems else "passed"))
    return 1 if problems else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bundle")
    b.add_argument("kit", type=Path)
    c = sub.add_parser("check")
    c.add_argument("kit", type=Path)
    c.add_argument("--max-mib", type=float, default=64.0)
    c.add_argument("--json", type=Path)
    a = ap.parse_args()
    if not a.kit.is_dir():
        print(f"gpu-kit: {a.kit} is not a directory", file=sys.stderr)
        return 2
    return bundle(a.kit) if a.cmd == "bundle" else check(a.kit, a.max_mib, a.json)


if __name__ == "__main__":
    raise SystemExit(main())
