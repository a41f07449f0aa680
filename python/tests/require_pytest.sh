# Sourced by the scripts ctest runs the Python tests with
# (python/tests/run_pytest.sh, tests/gateway/run_tests.sh):
#   require_pytest PYTHON
# returns where PYTHON runs and imports pytest; else exits 77 (ctest:
# skipped) and says why: Debian's python3-pytest, which scripts/install-deps
# installs, is missing.
require_pytest() {
  local python=$1
  if [[ ! -x "$python" ]]; then
    echo "SKIPPED: no python3 ('$python'); scripts/install-deps installs python3 and python3-pytest"
    exit 77
  fi
  if ! "$python" -c 'import pytest' 2>/dev/null; then
    echo "SKIPPED: $python has no pytest; install python3-pytest (scripts/install-deps does)"
    exit 77
  fi
}
