#!/usr/bin/env bash
# Builds and runs every GPU test and the GPU micro-benchmark on a machine with
# a CUDA device, then prints a summary. Meant for the times a GPU machine is
# lent; finishes in well under 5 minutes on an H200 (build ~1-2 min with all
# cores, tests and benchmark < 1 min).
#
#   tests/gpu/run.sh [build-dir]      (default: build-gpu in the repo root)
#   JOBS=n BUILD_TYPE=t tests/gpu/run.sh   (defaults: all cores, Release)
#
# Exit status: 0 when every step passed and no GPU test skipped for want of
# a device; 1 otherwise.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$root/build-gpu}"
jobs="${JOBS:-$(nproc 2>/dev/null || echo 4)}"
build_type="${BUILD_TYPE:-Release}"
nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"

declare -a names=() results=()
record() { names+=("$1"); results+=("$2"); }

summary() {
  echo
  echo "=== GPU run summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), build $build) ==="
  local i fail=0
  for i in "${!names[@]}"; do
    printf '  %-28s %s\n' "${names[$i]}" "${results[$i]}"
    case "${results[$i]}" in PASS*) ;; *) fail=1 ;; esac
  done
  if [ -f "$build/gpu-bench.txt" ]; then
    # The reference worker with --cuda: every engine step on the device, its
# checksums compared with the CPU reference, every token checked by a client.
echo "--- fairsched-worker --cuda ---"
log="$build/worker_cuda.log"
timeout 120 "$build/tests/worker_test" --gtest_color=no --gtest_filter='*Cuda*' >"$log" 2>&1
rc=$?
grep -E '^\[  (PASSED|FAILED|SKIPPED) |needs a CUDA device' "$log" | head -20
if [ "$rc" -ne 0 ]; then
  record "fairsched-worker --cuda" "FAIL (exit $rc, see $log)"
elif grep -q "needs a CUDA device" "$log"; then
  record "fairsched-worker --cuda" "FAIL (skipped: no CUDA device)"
else
  record "fairsched-worker --cuda" "PASS"
fi

echo "--- benchmark ---"
    grep -E '^(overhead|pack|memcpy|pack_vs_copy|target|cuda:)' "$build/gpu-bench.txt" | sed 's/^/  /'
  fi
  [ "$fail" -eq 0 ] && echo "RESULT: PASS" || echo "RESULT: FAIL"
  return "$fail"
}

echo "--- device ---"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
else
  echo "nvidia-smi not found (the tests will say whether a device is usable)"
fi
if [ ! -x "$nvcc" ]; then
  echo "nvcc not found (PATH or /usr/local/cuda/bin): cannot build the CUDA parts"
  record "configure" "FAIL (no nvcc)"
  summary
  exit 1
fi

echo "--- configure ($build) ---"
mkdir -p "$build"
rm -f "$build/gpu-bench.txt"  # never summarize a previous run's numbers
if ! timeout 120 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="$build_type" \
      -DFAIRSCHED_BENCH=OFF -DFAIRSCHED_TESTS=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
      >"$build/configure.log" 2>&1; then
  tail -30 "$build/configure.log"
  record "configure" "FAIL (see $build/configure.log)"
  summary
  exit 1
fi
if ! grep -q "building the CUDA parts" "$build/configure.log"; then
  tail -30 "$build/configure.log"
  record "configure" "FAIL (CMake did not enable CUDA)"
  summary
  exit 1
fi
record "configure" "PASS"

targets=(kernels_reference_test kernels_cuda_test cuda_executor_test cpu_executor_test client_daemon_test
         worker_test fairsched-worker fairsched_cuda_bench)
echo "--- build (${targets[*]}) ---"
if ! timeout 240 cmake --build "$build" -j "$jobs" --target "${targets[@]}" \
      >"$build/build.log" 2>&1; then
  tail -40 "$build/build.log"
  record "build" "FAIL (see $build/build.log)"
  summary
  exit 1
fi
record "build" "PASS"

# A test binary passes when gtest passes it and no test skipped for want of a
# device (on this machine that would hide the very thing being checked).
for t in kernels_reference_test kernels_cuda_test cuda_executor_test cpu_executor_test client_daemon_test; do
  echo "--- $t ---"
  log="$build/$t.log"
  timeout 120 "$build/tests/$t" --gtest_color=no >"$log" 2>&1
  rc=$?
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^seed |no CUDA device' "$log" | head -40
  passed="$(grep -cE '^\[       OK \]' "$log")"
  skipped="$(grep -cE '^\[  SKIPPED \] .*\(' "$log")"
  if [ "$rc" -eq 124 ]; then
    record "$t" "FAIL (timed out after 120 s)"
  elif [ "$rc" -ne 0 ]; then
    record "$t" "FAIL (exit $rc, see $log)"
  elif grep -q "^no CUDA device:" "$log"; then
    record "$t" "FAIL (skipped: $(grep -m1 '^no CUDA device:' "$log"))"
  else
    record "$t" "PASS ($passed passed, $skipped skipped)"
  fi
done

echo "--- benchmark ---"
timeout 120 "$build/bin/fairsched_cuda_bench" 2>&1 | tee "$build/gpu-bench.txt"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  record "fairsched_cuda_bench" "FAIL (exit $rc)"
elif grep -q "^cuda: not measured" "$build/gpu-bench.txt"; then
  record "fairsched_cuda_bench" "FAIL (cuda not measured: no device)"
else
  record "fairsched_cuda_bench" "PASS"
fi

summary
