#!/usr/bin/env bash
# Runs tests/gateway/test_gateway.py (real fairschedd, fake upstream, the
# gateway) with PYTHON, as ctest does. Exit 77 (skipped, said so) where
# PYTHON or its pytest is missing: Debian's python3-pytest, which
# scripts/install-deps installs. Under sanitizers the binaries are the
# sanitized ones; the tests stretch their time boxes (FAIRSCHED_SANITIZED).
#   run_tests.sh PYTHON [PYTEST_ARGS...]
python=${1:?usage: $0 PYTHON [PYTEST_ARGS...]}
shift
if [[ ! -x "$python" ]]; then
  echo "SKIPPED: no python3 ('$python'); scripts/install-deps installs python3 and python3-pytest"
  exit 77
fi
if ! "$python" -c 'import pytest' 2>/dev/null; then
  echo "SKIPPED: $python has no pytest; install python3-pytest (scripts/install-deps does)"
  exit 77
fi
cd "$(dirname "$0")" || exit 1
exec "$python" -m pytest -q -p no:cacheprovider test_gateway.py "$@"
