#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Writes CHANGELOG.md with antsibull-changelog (docs/development.md, "Changelog"): the releases in
# changelogs/changelog.yaml and, while changelogs/fragments/ holds fragments, the version galaxy.yml
# names, as `antsibull-changelog release` will write it. That release is made in a temporary copy:
# changelogs/changelog.yaml and the fragments are left as they are. The release itself, when a version
# is published, is `antsibull-changelog release` in the checkout (it folds the fragments into
# changelogs/changelog.yaml, removes them and writes CHANGELOG.md the same way).
#
# Usage: scripts/changelog.sh [OUTPUT]   write OUTPUT instead of CHANGELOG.md (tests/unit/test_changelog.py
#                                        compares the two)
# Exit:  0 written; 1 antsibull-changelog refused (an invalid fragment: its message); 4 could not run.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$(realpath -m "${1:-$repo/CHANGELOG.md}")
if [[ -x $repo/.venv/bin/antsibull-changelog ]]; then
  export PATH="$repo/.venv/bin:$PATH"
fi
for prog in antsibull-changelog ansible-doc; do
  if ! command -v "$prog" >/dev/null; then
    echo "changelog: $prog not found; run scripts/setup.sh first." >&2
    exit 4
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fabricops-changelog.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# What a release reads: galaxy.yml (name, version), the changelog settings, data and fragments, and the
# plugins (ansible-doc lists the modules and plugins whose version_added is the version released).
mkdir -p "$tmp/collection/changelogs/fragments"
cp -a "$repo/galaxy.yml" "$repo/meta" "$repo/plugins" "$tmp/collection/"
cp -a "$repo/changelogs/config.yaml" "$repo/changelogs/changelog.yaml" "$tmp/collection/changelogs/"
if [[ -d $repo/changelogs/fragments ]]; then
  cp -a "$repo/changelogs/fragments/." "$tmp/collection/changelogs/fragments/"
fi
cd "$tmp/collection"
# the checkout's ansible.cfg and collection path would make ansible-doc read the checkout, not this copy
unset ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH ANSIBLE_COLLECTIONS_PATHS

if compgen -G 'changelogs/fragments/*.yml' >/dev/null || compgen -G 'changelogs/fragments/*.yaml' >/dev/null; then
  antsibull-changelog release || exit 1
else
  antsibull-changelog generate || exit 1
fi
cp CHANGELOG.md "$out"
