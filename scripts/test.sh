#!/usr/bin/env bash
# The full test suite: lint (ruff, yamllint, ansible-lint production profile, ansible-test sanity
# on the built collection), then pytest
# (unit tests on real captured output, and integration tests on the emulated rack).
# Installs what it needs first; safe to run again. Exit non-zero when any lint or test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"

echo "== ruff"
ruff check src tests plugins bench
echo "== yamllint"
yamllint -s .
echo "== ansible-lint"
ansible-lint --offline -q
echo "== ansible-test sanity"
bash scripts/sanity.sh
if [[ ${CI:-} == true ]]; then
  # CI proves the whole thing: the emulated rack must come up (a skip would hide a broken lab),
  # starting from a clean machine even if an earlier run left a lab behind.
  export FABRICOPS_REQUIRE_LAB=1
  fabricops lab down >/dev/null 2>&1 || true
fi
echo "== conformance venv (real clients: mellanox.onyx in Ansible 7.7.0)"
bash scripts/conformance-venv.sh
echo "== pytest"
python -m pytest -p no:cacheprovider "$@"
