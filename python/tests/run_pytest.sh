#!/usr/bin/env bash
# Runs one test file of the Python package (python/tests) with PYTHON, as
# ctest does for each file. Exit 77 (skipped, and said so) where PYTHON is
# missing or has no pytest: Debian's python3-pytest, which
# scripts/install-deps installs.
#   run_pytest.sh PYTHON TEST_FILE [PYTEST_ARGS...]
python=${1:?usage: $0 PYTHON TEST_FILE [PYTEST_ARGS...]}
file=${2:?usage: $0 PYTHON TEST_FILE [PYTEST_ARGS...]}
shift 2
if [[ -n "${FAIRSCHED_SANITIZED:-}" ]]; then
  # python3 does not load the sanitizer runtime a sanitized libfairsched
  # needs; the package's tests run in the plain build (make test).
  echo "SKIPPED: libfairsched is built with -fsanitize=$FAIRSCHED_SANITIZED, which python3 cannot load"
  exit 77
fi
source "$(dirname "$0")/require_pytest.sh"
require_pytest "$python"
# A test file that needs more than the package names it in a line
# `# fairsched-test-requires: MODULE...`; skipped, with why, where one is
# missing (test_torch_worker.py: python3-torch, which install-deps installs).
for module in $(sed -n 's/^# fairsched-test-requires: *//p' "$file"); do
  if ! err=$("$python" -c "import $module" 2>&1); then
    echo "SKIPPED: $(basename "$file") needs the Python module '$module', which $python cannot import: ${err##*$'\n'}"
    exit 77
  fi
done
exec "$python" -m pytest -q -p no:cacheprovider "$file" "$@"
