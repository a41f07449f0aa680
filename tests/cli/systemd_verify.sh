#!/usr/bin/env bash
# systemd-analyze verify on the shipped unit, with its paths pointed at the
# built daemon and the repository's config. Exit 77 (skipped) where
# systemd-analyze is not installed.
#   tests/cli/systemd_verify.sh SOURCE_DIR FAIRSCHEDD
set -euo pipefail
src=$1
daemon=$2
if ! command -v systemd-analyze >/dev/null; then
  echo "systemd_verify: skipped: systemd-analyze not installed"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed -e "s|/usr/bin/fairschedd|$daemon|g" \
    -e "s|/etc/fairsched/fairsched.toml|$src/config/fairsched.toml|g" \
    "$src/systemd/fairschedd.service" > "$work/fairschedd.service"
out=$(systemd-analyze verify --man=no "$work/fairschedd.service" 2>&1) || {
  echo "$out"
  echo "systemd_verify: FAILED"
  exit 1
}
# verify prints warnings without failing: treat any line about our unit as an error.
if grep -q "fairschedd.service" <<<"$out"; then
  echo "$out"
  echo "systemd_verify: FAILED (warnings about the unit)"
  exit 1
fi
echo "systemd_verify: ok"
