#!/usr/bin/env python3
"""The GPU kit `make gpu-kit` built (gpu-kit/ by default), checked as it
would go to a lent GPU machine: its size and libraries (the checker), then
gpu-kit/run here. Without a GPU every CUDA step must be SKIPPED with its
reason and nothing may fail; the torch worker test runs on CPU where the
kit's Python imports torch.

    gpu_kit_test.py KIT_DIR

Exit 77 (skipped, with why) where no kit is built: `make gpu-kit` builds one
(it needs nvcc; CI builds it where nvcc is found).
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
CUDA_STEPS = ("kernels_cuda_test", "cuda_executor_test", "daemon_cuda", "worker_cuda",
              "cuda_bench")


def main() -> int:
    kit = Path(sys.argv[1])
    if os.environ.get("FAIRSCHED_SANITIZED"):
        print("SKIPPED: the GPU kit is checked by the plain build's tests (make test)")
        return 77
    if not (kit / "run").exists():
        print(f"SKIPPED: no GPU kit at {kit}: `make gpu-kit` builds one (it needs nvcc)")
        return 77
    version = (kit / "VERSION").read_text().strip() if (kit / "VERSION").exists() else "?"
    print(f"kit {kit}, built from {version}")

    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_kit_libs.py"), "check",
                        str(kit)], capture_output=True, text=True)
    print(r.stdout + r.stderr)
    if r.returncode != 0:
        print("FAILED: the kit's size or libraries")
        return 1

    gpu = bool(shutil.which("nvidia-smi")) and bool(subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip())
    with tempfile.TemporaryDirectory(prefix="gpukit-run-") as out:
        env = dict(os.environ, OUT=out)
        for k in ("FAIRSCHED_LIBRARY", "FAIRSCHED_BIN_DIR", "PYTHONPATH"):
            env.pop(k, None)
        run = subprocess.run([str(kit / "run")], env=env, capture_output=True, text=True,
                             timeout=540)
        print(run.stdout + run.stderr)
        summary_path = Path(out) / "gpu-summary.json"
        if not summary_path.exists():
            print("FAILED: gpu-kit/run wrote no gpu-summary.json into $OUT")
            return 1
        summary = json.loads(summary_path.read_text())
    problems = []
    if run.returncode != 0 or summary["result"] != "PASS":
        problems.append(f"gpu-kit/run exited {run.returncode}, result {summary['result']}, "
                        f"failed: {summary['failed']}")
    steps = {s["name"]: s for s in summary["steps"]}
    for name in ("libraries", *CUDA_STEPS, "torch_worker_test", "torch_bench"):
        if name not in steps:
            problems.append(f"no step {name} in the summary")
    for s in summary["steps"]:
        if s["status"] == "SKIPPED" and not s["reason"]:
            problems.append(f"{s['name']} skipped without a reason")
    if not gpu:
        for name in CUDA_STEPS:
            s = steps.get(name, {})
            if s.get("status") != "SKIPPED" or "CUDA device" not in s.get("reason", "") \
                    and "not measured" not in s.get("reason", ""):
                problems.append(f"{name}: expected SKIPPED for want of a CUDA device, got {s}")
        t = steps.get("torch_worker_test", {})
        if summary["torch"]["importable"]:
            if t.get("status") != "PASS" or t.get("device") != "cpu":
                problems.append(f"torch_worker_test should pass on cpu here: {t}")
        elif t.get("status") != "SKIPPED":
            problems.append(f"torch_worker_test should be skipped (no torch): {t}")
    if summary["seconds"] > summary["budget_s"] + 30:
        problems.append(f"the run took {summary['seconds']} s, over its budget")
    for p in problems:
        print(f"FAILED: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
