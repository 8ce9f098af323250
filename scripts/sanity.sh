#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ansible-test sanity on the collection fabricops.fabric as it ships (what Galaxy's importer checks).
#
# The files git would commit are staged, built with `ansible-galaxy collection build` (so galaxy.yml's
# build_ignore applies: tests/, bench/, ee/ ... are not collection content) and installed at
# <tmp>/ansible_collections/fabricops/fabric, the layout ansible-test needs; then
# `ansible-test sanity --venv` runs there (no containers). ansible-test keeps its per-test virtual
# environments in ~/.ansible/test/venv (its own cache, outside the repository; the first run fills it
# from PyPI). Runnable from any directory.
#
# Usage: scripts/sanity.sh [extra ansible-test sanity arguments, e.g. --test pep8]
# Env:   SANITY_PYTHON   Python version for ansible-test (default: the one ansible-test runs on)
#        SANITY_KEEP=1   keep the temporary collection (its tests/output/ holds the results)
# Exit:  0 no findings; 1 findings, or a test was skipped; 4 could not run (tool missing, build failed).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -x $repo/.venv/bin/ansible-test ]]; then
  export PATH="$repo/.venv/bin:$PATH"
fi
if ! command -v ansible-test >/dev/null; then
  echo "sanity: ansible-test not found; run scripts/setup.sh first." >&2
  exit 4
fi
if ! command -v git >/dev/null; then
  echo "sanity: git not found; install git (scripts/setup.sh does)." >&2
  exit 4
fi
# A missing shellcheck makes ansible-test skip that test with a warning: fail closed instead.
if ! command -v shellcheck >/dev/null; then
  echo "sanity: shellcheck not found; install it (apt-get install shellcheck) so the shell scripts are checked." >&2
  exit 4
fi
bindir=$(dirname "$(command -v ansible-test)")
python_version=${SANITY_PYTHON:-$("$bindir/python3" -c 'import sys; print("%d.%d" % sys.version_info[:2])')}

# ansible-test bootstraps pip into each empty venv with pypa's get-pip.py, downloaded from
# ci-files.testing.ansible.com and cached as ~/.ansible/test/cache/get_pip_<version>.py
# (ansible_test/_util/target/setup/requirements.py). Where that host is unreachable (only package
# registries are), put a stand-in there that does the same job from the bundled pip and PyPI.
pip_version=$("$bindir/python3" -c 'from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(type("P", (), {"version": "'"$python_version"'"})())["pip"])')
get_pip=$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py
if [[ ! -s $get_pip ]]; then
  mkdir -p "$(dirname "$get_pip")"
  cat >"$get_pip" <<'EOF'
"""Stand-in for pypa's get-pip.py, written by fabricops scripts/sanity.sh.

ansible-test runs it in a venv created without pip, with pip-install arguments (pip==X and pip
options) plus get-pip's own --no-setuptools/--no-wheel. It installs the pip wheel bundled with this
Python (ensurepip), then the requested packages from the package index.
"""
import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], check=True, stdout=subprocess.DEVNULL)
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", "-q", *args]))
EOF
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fabricops-sanity.XXXXXX")
coll=$tmp/ansible_collections/fabricops/fabric
cleanup() {
  if [[ ${SANITY_KEEP:-0} == 1 ]]; then
    echo "sanity: collection kept at $coll (results in $coll/tests/output/)"
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT

# Stage the files git would commit: tracked (minus those deleted in the work tree) plus untracked,
# not ignored - so local junk (.venv, caches, the lab inventory) never reaches the build.
stage=$tmp/stage
mkdir -p "$stage"
cd "$repo"
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "sanity: $repo is not a git checkout; the files to test are the ones git lists." >&2
  exit 4
fi
git ls-files -z --cached --others --exclude-standard --deduplicate \
  | while IFS= read -r -d '' f; do if [[ -e $f || -L $f ]]; then printf '%s\0' "$f"; fi; done \
  | tar --null -T - -cf - | tar -xf - -C "$stage"

# Test the collection as it ships: built with galaxy.yml's build_ignore (tests/, bench/, ee/ ... are
# not collection content) and installed where ansible-test needs it.
cd "$tmp"
unset ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH ANSIBLE_COLLECTIONS_PATHS
if ! ansible-galaxy collection build "$stage" --output-path "$tmp" >"$tmp/build.log" 2>&1 \
  || ! ansible-galaxy collection install --offline --no-deps -p "$tmp" "$tmp"/fabricops-fabric-*.tar.gz \
    >>"$tmp/build.log" 2>&1; then
  cat "$tmp/build.log" >&2
  echo "sanity: could not build and install the collection (log above)." >&2
  exit 4
fi
# build_ignore drops tests/, but ansible-test reads its ignore file from tests/sanity/ of the content.
if [[ -d $stage/tests/sanity ]]; then
  mkdir -p "$coll/tests"
  cp -a "$stage/tests/sanity" "$coll/tests/"
fi
rm -rf "$stage"
cd "$coll"

log=$tmp/sanity.log
echo "sanity: ansible-test sanity --venv --python $python_version in $coll"
set +e
ansible-test sanity --venv --python "$python_version" --color no "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
# A skipped test checked nothing: fail. ansible-test skips a test whose program is missing with only
# 'Required program "X" not found' (pslint's pwsh is fine while there is no PowerShell to lint).
if grep -qE "^WARNING: Skipping sanity test" "$log"; then
  echo "sanity: a sanity test was skipped (see WARNING above)." >&2
  rc=1
fi
while IFS= read -r prog; do
  if [[ $prog == pwsh ]] && [[ -z $(find "$coll" -path "$coll/tests/output" -prune -o \
      \( -name '*.ps1' -o -name '*.psm1' -o -name '*.psd1' \) -print -quit) ]]; then
    continue
  fi
  echo "sanity: \"$prog\" is missing, so a sanity test was skipped; install it." >&2
  rc=1
done < <(sed -n 's/^WARNING: Required program "\([^"]*\)" not found.*/\1/p' "$log" | sort -u)
if [[ $rc -ne 0 ]]; then
  SANITY_KEEP=1
  echo "sanity: FAILED (exit $rc); log $log, results under $coll/tests/output/" >&2
  exit 1
fi
echo "sanity: clean"
