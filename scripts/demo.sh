#!/usr/bin/env bash
# The whole job on the emulated rack, on one machine (Debian 12, as root), safe to run again:
#   1. install what fabricops needs (scripts/setup.sh: Debian packages, .venv, the collection link)
#   2. bring the lab up (fabricops lab up: 4 GPU hosts, Onyx + Cumulus switches, OFED mirror;
#      with the lab already up it only repairs what is down)
#   3. ansible-playbook site.yml: MLNX_OFED -> IPoIB / RoCE host QoS -> NCCL profile on the hosts
#      (a new rack: every host in one batch), RoCE lossless on the switches, then verification
#   4. print the verification summary (reports: .cache/verify/verify.json, verify.xml)
# Extra arguments go to ansible-playbook (e.g. --limit gpu01,gpu02 or -e fabricops_serial=2).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) -ne 0 ]]; then
  echo "demo: the emulated rack needs root (network namespaces, systemd-nspawn)" >&2
  exit 1
fi

bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
export ANSIBLE_CALLBACK_RESULT_FORMAT=json   # one JSON string per summary line (yaml would wrap them)

echo "== fabricops lab up"
fabricops lab up

# The lab is a new rack: consent to load the freshly installed driver (openibd restart) and to
# bring up the planned IPoIB interfaces. (The lab's inventory plans the NCCL profile and IPoIB
# networks as a real rack's does: inventories/example/.) A new rack carries no traffic yet, so every
# host and every switch is brought up in one batch (docs/operations.md, "Rolling rollout"); to watch
# the rolling batches a running cluster gets, pass -e fabricops_serial=1 -e fabricops_switch_serial=1.
echo "== ansible-playbook site.yml"
log=.cache/demo-site.log
mkdir -p .cache
rc=0
# The whole output goes to the log; the terminal gets it without the verification play's summary
# task (its JSON-quoted lines), which is printed once, readable, at the end.
ansible-playbook site.yml -e mlnx_ofed_allow_restart=true -e ipoib_allow_restart=true \
  -e fabricops_serial=100% -e fabricops_switch_serial=100% "$@" 2>&1 | tee "$log" \
  | awk '/^TASK \[Show the summary\]/ {skip=1} skip && /^(TASK|PLAY)/ && !/Show the summary/ {skip=0}
         !skip {print; fflush()}' \
  || rc=$?

echo
echo "== verification summary"
# The summary is what `fabricops verify` printed inside site.yml's verification play.
awk '/^TASK \[Show the summary\]/ {on=1; next} on && /^(TASK|PLAY) / {on=0} on' "$log" \
  | sed -n 's/^ *- //p; s/^ *"\(.*\)",\{0,1\}$/\1/p'
if ((rc == 0)); then
  echo "demo: site.yml finished and every verification check passed (reports in .cache/verify/)"
else
  echo "demo: site.yml failed (exit $rc); see $log" >&2
fi
exit "$rc"
