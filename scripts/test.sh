#!/usr/bin/env bash
# The test suite. Installs what it needs first; safe to run again. Exit non-zero when any step fails.
#
#   bash scripts/test.sh            the whole proof (what CI runs): lint (ruff, yamllint, ansible-lint
#                                   production profile), ansible-test sanity on the built collection,
#                                   unit and conformance tests, then the integration tests on the
#                                   emulated rack. The rack (image build, lab up) comes up in the
#                                   background while lint, sanity and the unit tests run.
#   bash scripts/test.sh --quick    the contributor's tier: lint, sanity, unit and conformance tests;
#                                   no emulated rack (about 10 minutes on 2 cores).
#   bash scripts/test.sh [--quick] -- PYTEST_ARGS...
#                                   the same steps; the arguments go to every pytest run
#                                   (e.g. -- -k nvue, or -- -x).
#
# Environment: FABRICOPS_TEST_WORKERS  xdist workers for unit and conformance tests (default 4: those
#                                      tests wait on SSH sessions and child processes far more than they
#                                      compute, so 4 workers keep 2 cores busy);
#              FABRICOPS_TEST_ORDER    forward (default), reverse or random:SEED - the order tests run
#                                      in (tests/conftest.py); the flakiness hunt uses it.
# Every run ends with a table of seconds per phase and the 15 slowest tests (tests/ci_times.py);
# it goes to the log only.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
pytest_args=()
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --) shift; pytest_args+=("$@"); break ;;
    *) pytest_args+=("$1") ;;
  esac
  shift
done
workers=${FABRICOPS_TEST_WORKERS:-4}

times_dir=$(mktemp -d "${TMPDIR:-/tmp}/fabricops-test-times.XXXXXX")
phase_log=$times_dir/phases.tsv
: >"$phase_log"
lab_pid=
cpu_pid=
finish() {
  rc=$?
  if [[ -n $cpu_pid ]]; then kill "$cpu_pid" 2>/dev/null || true; fi
  if [[ -n $lab_pid ]] && kill -0 "$lab_pid" 2>/dev/null; then
    # a failed foreground step ends the run: stop the background integration tests (their own
    # process group, setsid) and show what they had printed
    kill -TERM -- "-$lab_pid" 2>/dev/null || true
    wait "$lab_pid" 2>/dev/null || true
    echo "== the background integration tests were stopped; their output so far:"
    cat "$lab_log" 2>/dev/null || true
  fi
  if [[ -x .venv/bin/python ]]; then
    .venv/bin/python tests/ci_times.py "$phase_log" --cpu "$times_dir/cpu.log" "$times_dir"/*.xml || true
  fi
  rm -rf "$times_dir"
  exit "$rc"
}
trap finish EXIT

# phase NAME CMD... : run CMD, record its wall-clock seconds and exit status under NAME.
phase() {
  local name=$1 start end rc=0
  shift
  echo "== $name"
  start=$(date +%s.%N)
  "$@" || rc=$?
  end=$(date +%s.%N)
  printf '%s\t%s\t%s\t%s\n' "$name" "$start" "$end" "$([[ $rc -eq 0 ]] && echo ok || echo "FAILED ($rc)")" \
    >>"$phase_log"
  return "$rc"
}

# The machine's CPU counters every 5 s (the first line of /proc/stat), so the table can say how busy
# the CPU was during each phase: a phase that waits leaves it idle, one that computes does not.
(while :; do echo "$(date +%s.%N) $(head -n 1 /proc/stat)"; sleep 5; done >"$times_dir/cpu.log" 2>/dev/null) &
cpu_pid=$!

phase "setup" bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"

pytest=(python -m pytest -p no:cacheprovider --durations=15)
lab_log=$times_dir/lab.log
if ((!quick)); then
  if [[ ${CI:-} == true ]]; then
    # CI proves the whole thing: the emulated rack must come up (a skip would hide a broken lab),
    # starting from a clean machine even if an earlier run left a lab behind.
    export FABRICOPS_REQUIRE_LAB=1
    fabricops lab down >/dev/null 2>&1 || true
  fi
  # The emulated rack and its integration tests run in the background, beside the steps that do
  # not need it: lint, sanity and the unit and conformance tests spend most of their time waiting
  # on SSH sessions and child processes, the integration tests on Ansible's round trips. After the
  # rack is up, the integration files that touch disjoint hosts run as parallel pytest streams, then
  # the files that need the whole rack run alone (tests/integration/streams.py says which is which).
  # Nothing in the foreground touches what the rack makes: /var/lib/fabricops-lab, the image cache,
  # the lab's bridges and namespaces (the unit tests that plumb namespaces use fo-test-* names and
  # RFC 2544 addresses) and inventories/lab (yamllint and ansible-lint exclude it; unit tests name
  # their own inventories); each test process has its own runtime directory (tests/isolation.py).
  # The foreground runs at a lower CPU priority: the integration tests are the critical path.
  lab_up_here=0
  if [[ $(id -u) -eq 0 ]] && ! fabricops lab status >/dev/null 2>&1; then
    lab_up_here=1
  fi
  export -f phase
  export phase_log times_dir lab_up_here
  # shellcheck disable=SC2016 # the script's $vars expand in the background bash, from its exports
  setsid bash -c '
    set -uo pipefail
    if ((lab_up_here)); then
      phase "image build (background)" python -c "from fabricops_lab import image; image.ensure_image()" || exit 1
      phase "lab up (background)" fabricops lab up >/dev/null || exit 1
      export FABRICOPS_LAB_SHARED=1
    fi
    rc=0
    pids=()
    for stream in $(python tests/integration/streams.py --names); do
      mapfile -t files < <(python tests/integration/streams.py "$stream")
      if ((lab_up_here)); then
        phase "integration stream $stream (background)" "$@" --junitxml="$times_dir/integration-$stream.xml" \
          "${files[@]}" >"$times_dir/stream-$stream.log" 2>&1 &
        pids+=($!)
      else  # a lab that was up already, or none: one stream after another
        phase "integration stream $stream" "$@" --junitxml="$times_dir/integration-$stream.xml" \
          "${files[@]}" >"$times_dir/stream-$stream.log" 2>&1 || rc=1
      fi
    done
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    : >"$times_dir/streams.done"
    for stream in $(python tests/integration/streams.py --names); do
      echo "== integration stream $stream"
      cat "$times_dir/stream-$stream.log"
    done
    mapfile -t files < <(python tests/integration/streams.py whole-rack)
    phase "integration: the whole rack (background)" "$@" --junitxml="$times_dir/integration-whole.xml" \
      "${files[@]}" || rc=1
    if ((lab_up_here)); then fabricops lab down >/dev/null 2>&1 || true; fi
    exit "$rc"
  ' integration "${pytest[@]}" "${pytest_args[@]}" >"$lab_log" 2>&1 &
  lab_pid=$!
fi

# the foreground yields the CPU to the integration tests in the background (the critical path)
renice -n 10 $$ >/dev/null
phase "lint: ruff" ruff check src lab tests plugins bench
phase "lint: yamllint" yamllint -s .
phase "lint: ansible-lint" ansible-lint --offline -q
phase "lint: docs (mkdocs --strict)" mkdocs build --strict -q
phase "lint: changelog fragments (antsibull-changelog lint)" antsibull-changelog lint
phase "ansible-test sanity" bash scripts/sanity.sh

# The unit and conformance tests start once the parallel integration streams are done: the streams
# keep both cores busy, while the whole-rack files after them leave about half the CPU idle (they
# wait on Ansible's round trips one file at a time), and the unit tests fit in that half.
wait_for_streams() {
  while [[ -n $lab_pid ]] && kill -0 "$lab_pid" 2>/dev/null && [[ ! -e $times_dir/streams.done ]]; do
    sleep 2
  done
}
if ((!quick)) && ((${lab_up_here:-0})); then
  phase "waiting for the integration streams" wait_for_streams
fi
# The conformance venv (pip installing the vendors' old clients: a core's worth of CPU for a minute)
# is built after the streams too: during them it took that core from the critical path.
phase "conformance venv" bash scripts/conformance-venv.sh

# Unit and conformance tests: no lab, under xdist. worksteal hands a finished worker the queued
# tests of a busy one, so the long SSH cases at the end do not leave a worker idle.
phase "pytest: unit (xdist, $workers workers)" \
  "${pytest[@]}" -n "$workers" --dist worksteal --junitxml="$times_dir/unit.xml" tests/unit "${pytest_args[@]}"
phase "pytest: conformance (xdist, $workers workers)" \
  "${pytest[@]}" -n "$workers" --dist worksteal --junitxml="$times_dir/conformance.xml" tests/conformance \
  "${pytest_args[@]}"

if ((quick)); then
  echo "test.sh --quick: lint, sanity, unit and conformance tests passed (the emulated rack's tests: run without --quick)"
  exit 0
fi

echo "== waiting for the integration tests (running in the background since setup)"
lab_rc=0
wait "$lab_pid" || lab_rc=$?
lab_pid=
cat "$lab_log"
if ((lab_rc != 0)); then
  echo "test.sh: the integration tests failed (exit $lab_rc; their output above)." >&2
  exit 1
fi
