#!/usr/bin/env bash
# The full test suite: lint (ruff, yamllint, ansible-lint production profile), then pytest
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
echo "== pytest"
python -m pytest -p no:cacheprovider "$@"
