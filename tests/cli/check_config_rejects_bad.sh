#!/usr/bin/env bash
# fairschedd --check-config: exit 1 naming file, line and key for a bad
# config; exit 0 with a summary for a good one; exit 2 on a usage error.
#   check_config_rejects_bad.sh PATH/TO/fairschedd
set -u

daemon=${1:?usage: $0 PATH/TO/fairschedd}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# Runs the daemon; sets rc, out, err.
run() {
  "$daemon" "$@" >"$dir/out" 2>"$dir/err"
  rc=$?
  out=$(cat "$dir/out")
  err=$(cat "$dir/err")
}

cat >"$dir/good.toml" <<'TOML'
[[tiers]]
name = "paid"
[endpoints.chat]
kind = "streaming"
[tenants.acme]
tier = "paid"
[tenants.acme.limits]
chat = ["600 requests/minute"]
TOML

# Line 8 carries the typo.
sed 's|600 requests/minute|600 requests/minite|' "$dir/good.toml" >"$dir/bad.toml"

run --check-config "$dir/good.toml"
[[ $rc -eq 0 ]] || fail "good config: exit $rc, want 0 (stderr: $err)"
[[ "$out" == "$dir/good.toml: ok (1 tiers, 1 endpoints, 1 tenants, 0 client rules)" ]] ||
  fail "good config: stdout '$out'"

run --check-config "$dir/bad.toml"
[[ $rc -eq 1 ]] || fail "bad config: exit $rc, want 1"
[[ "$err" == "$dir/bad.toml:8: tenants.acme.limits.chat: unknown unit 'minite'" ]] ||
  fail "bad config: stderr '$err'"
[[ -z "$out" ]] || fail "bad config: unexpected stdout '$out'"

run --check-config "$dir/missing.toml"
[[ $rc -eq 1 ]] || fail "missing file: exit $rc, want 1"
[[ "$err" == "$dir/missing.toml: cannot open: No such file or directory" ]] || fail "missing file: stderr '$err'"

run --check-config
[[ $rc -eq 2 ]] || fail "no file: exit $rc, want 2"

run --config "$dir/good.toml" --log-level loud
[[ $rc -eq 2 ]] || fail "bad --log-level: exit $rc, want 2"

run --bogus
[[ $rc -eq 2 ]] || fail "unknown flag: exit $rc, want 2"

run --help
[[ $rc -eq 0 && "$out" == *"Usage:"* && "$out" == *"--check-config FILE"* ]] ||
  fail "--help: exit $rc, stdout '$out'"

run --config "$dir/good.toml" --check-config "$dir/good.toml"
[[ $rc -eq 2 && "$err" == *"excludes"* ]] || fail "--config with --check-config: exit $rc, stderr '$err'"

run --config
[[ $rc -eq 2 ]] || fail "--config without a file: exit $rc, want 2"

run --log-level loud --config "$dir/good.toml"
[[ $rc -eq 2 && "$err" == *"unknown log level 'loud'"* ]] || fail "bad --log-level: stderr '$err'"

run --version
[[ $rc -eq 0 && "$out" == "fairschedd "* ]] || fail "--version: exit $rc, stdout '$out'"

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "check_config_rejects_bad: all checks passed"
