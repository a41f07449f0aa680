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


def test_the_completion_unpack_format_reads_every_field_where_ctypes_does() -> None:
    from fairsched import client

    assert client._COMPLETION.size == ctypes.sizeof(_ffi.CCompletion)
    c = _ffi.CCompletion()
    values = {}
    for i, (field, ctype) in enumerate(_ffi.CCompletion._fields_):
        value = 1000 + i if field != "tokens" else None
        if value is not None:
            setattr(c, field, value)
        values[field] = value
    tokens = (ctypes.c_uint32 * 3)(7, 8, 9)
    c.tokens = ctypes.cast(tokens, ctypes.POINTER(ctypes.c_uint32))
    c.token_count = 3
    c.status = 2
    got = client._from_c(c)
    assert (got.request_id, got.tag, got.output_tokens) == (1000, 1001, 1003)
    assert got.status.name == "OVERLOADED" and got.tokens == [7, 8, 9]
    assert (got.retry_after_ns, got.queue_wait_ns, got.service_ns, got.checksum) == (
        1004, 1005, 1006, 1007)
    assert got.local and got.partial and got.first_token == 1011
    assert (got.input_tokens, got.emitted_ns, got.time_to_first_token_ns) == (1014, 1015, 1016)
    c.token_count = 40
    big = (ctypes.c_uint32 * 40)(*range(40))
    c.tokens = ctypes.cast(big, ctypes.POINTER(ctypes.c_uint32))
    assert client._from_c(c).tokens == list(range(40))


def test_a_poll_buffer_decodes_as_each_completion_alone() -> None:
    from fairsched import client

    buf = (_ffi.CCompletion * 5)()
    keep = []
    for i, (count, status) in enumerate([(0, 0), (1, 7), (24, 0), (25, 10), (300, 99)]):
        c = buf[i]
        c.request_id, c.tag, c.status, c.partial, c.first_token = 10 + i, i, status, i % 2, 3 * i
        tokens = (ctypes.c_uint32 * max(count, 1))(*[(2**32 - 1 - j) for j in range(count)])
        keep.append(tokens)
        c.tokens = ctypes.cast(tokens, ctypes.POINTER(ctypes.c_uint32))
        c.token_count = count
    decoded = client._decode(buf, 5)
    assert decoded == [client._from_c(buf[i]) for i in range(5)]
    assert [type(d.tokens) for d in decoded] == [list] * 5
    assert [len(d.tokens) for d in decoded] == [0, 1, 24, 25, 300]
    assert decoded[4].tokens[:2] == [2**32 - 1, 2**32 - 2]
    assert decoded[4].status.name == "EXECUTOR_FAILED"  # a status this package does not know
    assert client._decode(buf, 0) == []
