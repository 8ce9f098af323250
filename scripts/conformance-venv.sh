#!/usr/bin/env bash
# The conformance venv: real clients nobody on this project wrote, in their own venv so their pins
# never touch the product's.
#   - Ansible 7.7.0: the last Ansible community package that bundles mellanox.onyx (1.0.0); Ansible 8
#     dropped it (the 8.x wheels carry no ansible_collections/mellanox/). It pins ansible-core ~=2.14.
#     ansible.netcommon (network_cli) comes in the bundle; paramiko is its SSH transport.
#   (netmiko, the other real client, is a product dependency: its conformance tests run in the main venv.)
# Idempotent: a venv whose stamp matches these pins is left as it is. Path: $FABRICOPS_CONFORMANCE_VENV
# (default .venv-conformance in the repo root, gitignored).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${FABRICOPS_CONFORMANCE_VENV:-$PWD/.venv-conformance}
PINS="ansible==7.7.0 paramiko<4"
PY=${PYTHON:-python3}
if [[ -x $VENV/bin/python && -f $VENV/.fabricops-pins && "$(cat "$VENV/.fabricops-pins")" == "$PINS" ]]; then
  echo "conformance venv $VENV is up to date"
  exit 0
fi
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# shellcheck disable=SC2086
"$VENV/bin/python" -m pip install -q $PINS
"$VENV/bin/ansible-galaxy" collection list mellanox.onyx 2>/dev/null | grep -q "mellanox.onyx" \
  || { echo "conformance venv: ansible did not bring mellanox.onyx" >&2; exit 1; }
echo "$PINS" >"$VENV/.fabricops-pins"
echo "conformance venv ready: $VENV"
