"""The ctypes structs match include/fairsched/fairsched.h byte for byte: a C
compiler prints every struct's size and each field's offset."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from fairsched import _ffi

STRUCTS = {
    "fairsched_options": _ffi.Options,
    "fairsched_submit_request": _ffi.SubmitRequest,
    "fairsched_completion": _ffi.CCompletion,
    "fairsched_retry_policy": _ffi.RetryPolicyC,
    "fairsched_worker_options": _ffi.WorkerOptions,
    "fairsched_work_item": _ffi.CWorkItem,
    "fairsched_worker_stats": _ffi.CWorkerStats,
}


def test_every_struct_has_the_headers_size_and_offsets(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to read the header's layout with")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "fairsched/fairsched.h"',
             "int main(void) {"]
    for cname, py in STRUCTS.items():
        lines.append(f'  printf("{cname} size %zu\\n", sizeof({cname}));')
        for field, _ in py._fields_:
            lines.append(f'  printf("{cname} {field} %zu\\n", offsetof({cname}, {field}));')
    lines += ["  return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    built = subprocess.run([cc, "-std=c11", f"-I{REPO / 'include'}", "-o", str(exe), str(src)],
                           capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=10, check=True).stdout
    want = {}
    for line in out.splitlines():
        cname, field, value = line.split()
        want[(cname, field)] = int(value)
    for cname, py in STRUCTS.items():
        assert ctypes.sizeof(py) == want[(cname, "size")], cname
        for field, _ in py._fields_:
            assert getattr(py, field).offset == want[(cname, field)], f"{cname}.{field}"


def test_the_header_has_no_field_the_structs_lack() -> None:
    header = (REPO / "include" / "fairsched" / "fairsched.h").read_text()
    for cname, py in STRUCTS.items():
        body = header.split(f"typedef struct {cname} {{", 1)[1].split(f"}} {cname};", 1)[0]
        declared = []
        for line in body.splitlines():
            code = line.split("/*")[0].strip()
            if code.endswith(";"):
                declared.append(code.rstrip(";").split()[-1].lstrip("*"))
        assert declared == [f for f, _ in py._fields_], cname
