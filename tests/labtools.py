"""Helpers shared by integration test modules (a plain module: see tests/captures.py for why)."""

from __future__ import annotations


def ensure_ofed(ssh, lab, host: str) -> str:
    """Install the lab's default emulated MLNX_OFED on a host from its tarball (checksum checked)."""
    version = lab["ofed"]["default_version"]
    artifacts = lab["ofed"]["versions"][version]
    before = ssh(host, "command -v ibstat ofed_info ibv_devinfo mlnx_qos || true").stdout
    if not before.strip():
        script = (
            "set -e; cd /tmp; "
            f"python3 -c 'import urllib.request,sys; urllib.request.urlretrieve(sys.argv[1], \"ofed.tgz\")' "
            f"{artifacts['tgz_url']}; "
            f"echo '{artifacts['tgz_sha256']}  ofed.tgz' | sha256sum -c - >/dev/null; "
            "rm -rf ofed && mkdir ofed && tar -xzf ofed.tgz -C ofed --strip-components=1; "
            "cd ofed && ./mlnxofedinstall --force --skip-distro-check"
        )
        out = ssh(host, script, timeout=300).stdout
        assert "/etc/init.d/openibd restart" in out  # the installer asks; it never restarts itself
    return version
