#!/usr/bin/env bash
# Every GPU check of fairsched on a machine that can build it (Debian 12 with
# scripts/install-deps and nvcc): builds the GPU kit, then runs it. A machine
# that cannot build (a bare CUDA image) runs a kit built elsewhere instead:
# gpu-kit/run (docs/gpu.md).
#
#   tests/gpu/run.sh [kit-dir]      (default: gpu-kit in the repo root)
#   JOBS=n tests/gpu/run.sh
#
# Exit status: gpu-kit/run's (0 when no step failed).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
kit="${1:-$root/gpu-kit}"
"$root/scripts/gpu-kit" "$kit"
exec "$kit/run"
