#!/usr/bin/env bash
# Install what fabricops needs on this machine (Debian 12 as root), safe to run again:
# Debian packages for the emulated rack and the tests, then the Python environment in .venv.
#   scripts/setup.sh [--arm64] [--rpm]
# --arm64 (opt-in, not CI's path) adds qemu-user-static: the lab's arm64 hosts (a topology host with
# `arch: arm64`) run under qemu-aarch64-static, which the lab registers with binfmt_misc itself
# (lab/src/fabricops_lab/foreign_arch.py); binfmt-support is not needed.
# --rpm (opt-in, not CI's path) adds what the lab's signed RPM repositories are built and checked with
# (lab/src/fabricops_lab/rpm_repo.py): rpm (rpmbuild, rpmsign, rpmkeys) and createrepo-c; gnupg is in the
# default list. dnf itself runs in the `rpm` host variant's root, not on the controller.
set -euo pipefail
cd "$(dirname "$0")/.."

ARM64=0
RPM=0
for arg in "$@"; do
  case $arg in
    --arm64) ARM64=1 ;;
    --rpm) RPM=1 ;;
    *) echo "usage: scripts/setup.sh [--arm64] [--rpm]" >&2; exit 2 ;;
  esac
done

DEB_PACKAGES=(
  python3 python3-venv python3-pip   # the controller's Python environment
  openssh-client                      # Ansible, netmiko and testinfra reach hosts over SSH
  iproute2                            # the lab's namespaces, veths and bridges
  debootstrap                         # the lab hosts' root filesystem, from Debian's packages
  systemd-container                   # systemd-nspawn boots the lab hosts with systemd as PID 1
  xorriso                             # the emulated MLNX_OFED ISO (real ISO 9660 image)
  prometheus                          # promtool, to test the alert rules
  prometheus-node-exporter            # node_exporter binary for the monitoring integration test
  gnupg                               # the lab signs its package mirrors (signed-by, never trusted=yes)
  shellcheck                          # ansible-test sanity's shellcheck test (scripts/sanity.sh)
  kmod                                # modprobe overlay / veth / bridge for the lab (preflight)
  netplan.io                          # netplan generate validates the IPoIB backend's files (unit tests)
  git
)
if ((ARM64)); then
  DEB_PACKAGES+=(qemu-user-static)    # arm64 lab hosts: qemu-aarch64-static through binfmt_misc
fi
if ((RPM)); then
  DEB_PACKAGES+=(rpm createrepo-c)    # the lab's RPM repositories: rpmbuild, rpmsign, createrepo_c
fi

missing=()
for pkg in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing Debian packages (${missing[*]}); run as root or install them first." >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The Debian packages start services we do not want on the controller.
  for svc in prometheus prometheus-node-exporter; do
    systemctl disable --now "$svc" >/dev/null 2>&1 || true
  done
fi

PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.fabricops-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp || lab/pyproject.toml -nt $stamp ]]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]' -e ./lab
  touch "$stamp"
fi
# The repo root is the collection fabricops.fabric; Ansible finds it through .collections/.
mkdir -p .collections/ansible_collections/fabricops
ln -sfn ../../.. .collections/ansible_collections/fabricops/fabric
