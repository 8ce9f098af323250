"""Which integration files run side by side (scripts/test.sh), and which need the rack to themselves.

The integration tests share one emulated rack. Files that touch disjoint hosts and switches run at
the same time, one pytest per stream (their tests wait on Ansible's SSH round trips far more than
they compute); the files that converge or judge the whole rack, swap its topology, rebuild it, or
move the subnet manager (every host's InfiniBand ports follow it) run after them, alone, one after
another. What each stream may touch is its name; tests/unit/test_streams.py checks that every
integration file is in exactly one place here, and a file that needs a host of another stream (or
a second switch) belongs in WHOLE_RACK.

Usage: python tests/integration/streams.py NAME|whole-rack  (that stream's files, one per line)
       python tests/integration/streams.py --names        (the streams' names, one per line)
"""

from __future__ import annotations

import sys

STREAMS: dict[str, list[str]] = {
    # host faults, the installed package, monitoring and drift, on gpu03 and gpu04; the ipoib role
    # on gpu03, the netplan host variant (restarted once)
    "gpu03-gpu04": ["test_host_faults.py", "test_install_like_a_user.py", "test_monitor.py",
                    "test_site_drift.py", "test_os_variants.py"],
    # MLNX_OFED, DOCA-Host and NIC firmware on gpu02; the IPoIB, NCCL and RoCE host roles on gpu01;
    # the lab's Slurm through slurmctl (drains and resumes gpu02 in Slurm only: no host state);
    # fabricops act on gpu01 and gpu02 (port faults cleared, drains resumed); verify's pair rounds as
    # Slurm job steps in an exclusive allocation of gpu01 and gpu02 (cancelled, queue checked empty);
    # the host runbooks on gpu02 (docs/runbooks: added from a purged stack, upgraded, backed out; drained
    # and resumed by the pages; first, as test_doca_firmware.py purges after it)
    "gpu01-gpu02": ["test_runbooks_hosts.py", "test_doca_firmware.py", "test_lab_slurm.py",
                    "test_mlnx_ofed.py",
                    "test_roles_ipoib.py",
                    "test_roles_nccl.py", "test_roles_roce_host.py", "test_act_slurm.py",
                    "test_verify_slurm.py"],
    # the roce_switch role on leaf-onyx and leaf-cumulus (no host); the switch runbooks
    # (docs/runbooks: leaf-onyx's password rotated and put back, leaf-cumulus cleared and reconverged)
    "leaves": ["test_roce_switch.py", "test_runbooks.py"],
}

#: the rack to themselves, in this order, after the streams
WHOLE_RACK: list[str] = [
    "test_lab_rack.py",  # the rack as booted (rebuilds it)
    "test_rack_emulation.py",  # every host and both leaves, as booted (rebuilds it)
    "test_phase_playbooks.py",  # each phase playbook on a host and the switches
    "test_services_fabric.py",  # moves the subnet manager: every host's IB ports follow
    "test_verify.py",  # site.yml on the whole rack, then verification across it
    "test_verify_two_tier.py",  # swaps the rack for the two-tier one, then restores it
    "test_lab_down.py",  # takes the rack down (marked lab_teardown: always last)
]


def main(argv: list[str]) -> int:
    if argv == ["--names"]:
        print("\n".join(STREAMS))
        return 0
    if len(argv) != 1 or (argv[0] not in STREAMS and argv[0] != "whole-rack"):
        print(f"usage: streams.py {{{','.join([*STREAMS, 'whole-rack'])}}}", file=sys.stderr)
        return 2
    for name in WHOLE_RACK if argv[0] == "whole-rack" else STREAMS[argv[0]]:
        print(f"tests/integration/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
