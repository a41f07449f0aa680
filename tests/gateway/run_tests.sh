#!/usr/bin/env bash
# Runs tests/gateway/test_gateway.py (real fairschedd, fake upstream, the
# gateway) with PYTHON, as ctest does. Exit 77 (skipped, said so) where
# PYTHON or its pytest is missing: Debian's python3-pytest, which
# scripts/install-deps installs. Under sanitizers the binaries are the
# sanitized ones; the tests stretch their time boxes (FAIRSCHED_SANITIZED).
#   run_tests.sh PYTHON [PYTEST_ARGS...]
python=${1:?usage: $0 PYTHON [PYTEST_ARGS...]}
shift
source "$(dirname "$0")/../../python/tests/require_pytest.sh"
require_pytest "$python"
cd "$(dirname "$0")" || exit 1
exec "$python" -m pytest -q -p no:cacheprovider test_gateway.py "$@"
