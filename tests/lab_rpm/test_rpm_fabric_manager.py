"""The fabric manager on the RHEL family: the nvidia_fabric_manager role on the lab's ``rpm`` host gpu02
(real dnf / rpm, Rocky Linux 9.4's identity; docs/lab-fidelity.md, "Host variants"), beside the
Debian host gpu01, from one inventory.

- the lab serves the fabric manager as a signed RPM repository and gives gpu02 (only) its URL, key
  URL and key sha256 as host variables; gpu01 keeps the apt repository;
- the first playbooks/fabric_manager.yml run converges both: on gpu02 the role writes
  /etc/yum.repos.d/nvidia-fabricmanager.repo (gpgcheck, repo_gpgcheck, gpgkey = the key it installed
  checksum-verified under /etc/pki/rpm-gpg), dnf installs nvidia-fabric-manager-<driver>-1 (signature
  checked: the key is imported into the rpmdb), ``dnf versionlock`` locks it, the service runs;
- a second run and ``--check`` report changed=0 on both;
- ``fabricops drift`` names a hand-made unlock and a hand-made removal, ``--fix`` puts both back;
- dnf refuses the same repository with its metadata altered (repo_gpgcheck) and with its packages
  signed by another key (gpgcheck): the run fails and the host keeps no package.

Each test after the first needs only the converged hosts and leaves them converged.
"""

from __future__ import annotations

import shutil

import pytest
from integration.conftest import ssh
from lab_rpm.conftest import DEB_HOST, RPM_HOST, fabric_manager
from labtools import fabricops_drift

pytestmark = pytest.mark.lab

DRIVER = "550.54.15"  # the lab's driver (fabricops_lab.hardware.DRIVER_VERSION)
PROBE = "; ".join([
    "rpm -qa --qf '%{NAME} %{VERSION}-%{RELEASE}\\n' | sort",
    "echo ---", "grep -v '^#' /etc/dnf/plugins/versionlock.list | grep . || true",
    "echo ---", "systemctl is-active nvidia-fabricmanager || true",
])


def probe() -> tuple[dict[str, str], list[str], str]:
    """gpu02's installed RPMs (name -> version-release), its versionlock entries, the service state."""
    pkgs, locks, active = ssh(RPM_HOST, PROBE, check=False).stdout.split("---\n")
    return (dict(ln.split() for ln in pkgs.splitlines() if ln.strip()), locks.split(), active.strip())


@pytest.fixture(scope="module")
def converged(rpm_lab):
    """The first fabric_manager.yml run on the new hosts (its AnsibleRun)."""
    assert probe()[0] == {}  # the rpmdb of a fresh rpm host holds no package at all
    # --check on the new hosts first: it reports what it would do and changes nothing
    check = fabric_manager("--check", "--diff")
    assert check.rc == 0 and check.hosts[RPM_HOST]["changed"] > 0, check.stdout[-4000:]
    assert "would run: dnf versionlock add nvidia-fabric-manager-" in check.stdout
    assert probe() == ({}, [], "inactive")
    assert ssh(RPM_HOST, "ls /etc/yum.repos.d").stdout.split() == []
    run = fabric_manager()
    assert run.rc == 0, run.stdout[-4000:] + run.stderr[-2000:]
    return run


def test_the_lab_gives_the_rpm_host_its_own_repository(rpm_lab):
    from fabricops_lab import inventory

    rpm = rpm_lab["fabric_manager"]["rpm"]
    assert rpm["repo_url"] == "http://198.51.100.1:8080/rpm/cuda/rhel9/x86_64/"
    hosts = inventory.hosts_yml(rpm_lab)["all"]["children"]["gpu_hosts"]["hosts"]
    assert hosts[RPM_HOST]["nvidia_fabric_manager_repo_url"] == rpm["repo_url"]
    assert hosts[RPM_HOST]["nvidia_fabric_manager_repo_key_sha256"] == rpm["repo_key_sha256"]
    assert "nvidia_fabric_manager_repo_url" not in hosts[DEB_HOST]  # group_vars: the apt repository
    # what Ansible reads on each
    facts = ssh(RPM_HOST, "python3 -c 'import dnf, rpm; print(dnf.VERSION, rpm.__version__)'; "
                "grep -E '^(ID|VERSION_ID)=' /etc/os-release").stdout.split()
    assert facts[0].startswith("4.14") and facts[1].startswith("4.18"), facts
    assert 'ID="rocky"' in facts and 'VERSION_ID="9.4"' in facts, facts


def test_first_run_installs_locks_and_starts_the_fabric_manager_with_dnf(converged):
    assert {h: s["changed"] > 0 for h, s in converged.hosts.items()} == {RPM_HOST: True, DEB_HOST: True}
    pkgs, locks, active = probe()
    assert pkgs.get("nvidia-fabric-manager") == f"{DRIVER}-1", pkgs
    assert "gpg-pubkey" in pkgs, pkgs  # dnf imported the repository key into the rpmdb
    assert locks == [f"nvidia-fabric-manager-0:{DRIVER}-1.*"], locks
    assert active == "active"
    repo = ssh(RPM_HOST, "cat /etc/yum.repos.d/nvidia-fabricmanager.repo").stdout
    for line in ("gpgcheck=1", "repo_gpgcheck=1",
                 "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-fabricmanager",
                 "baseurl=http://198.51.100.1:8080/rpm/cuda/rhel9/x86_64/"):
        assert line in repo.splitlines(), repo
    # the Debian host, same play: apt, dpkg hold
    deb = ssh(DEB_HOST, "dpkg-query -W -f='${Version} ${db:Status-Abbrev}' nvidia-fabricmanager-550").stdout
    assert deb.split() == [f"{DRIVER}-1", "hi"], deb
    # dnf itself now refuses to move the locked package
    out = ssh(RPM_HOST, f"dnf -q -y install nvidia-fabric-manager-{DRIVER.rsplit('.', 1)[0]}.14-1 2>&1",
              check=False)
    assert out.returncode != 0 and probe()[0]["nvidia-fabric-manager"] == f"{DRIVER}-1", out.stdout


def test_second_run_and_check_change_nothing(converged):
    for extra in ((), ("--check", "--diff")):
        run = fabric_manager(*extra)
        assert run.rc == 0, run.stdout[-3000:]
        changed = {h: s["changed"] for h, s in run.hosts.items()}
        assert set(changed.values()) == {0}, (extra, changed, run.changed_tasks())


def _drift(tmp_path, *args: str) -> tuple[int, list[str]]:
    rc, _out, data = fabricops_drift("--playbook", "playbooks/fabric_manager.yml", "--limit", RPM_HOST, *args,
                                    json_path=tmp_path / f"drift{len(list(tmp_path.iterdir()))}.json")
    return rc, [i["task"] for i in (data or {}).get("items", [])]


def test_drift_sees_a_hand_made_unlock_and_removal_and_fix_restores_them(converged, tmp_path):
    ssh(RPM_HOST, "dnf -q versionlock delete nvidia-fabric-manager")
    rc, tasks = _drift(tmp_path)
    assert (rc, tasks) == (3, ["Report the version lock --check cannot add"]), tasks
    ssh(RPM_HOST, "systemctl stop nvidia-fabricmanager; dnf -q -y remove nvidia-fabric-manager")
    assert "nvidia-fabric-manager" not in probe()[0]
    rc, tasks = _drift(tmp_path)
    assert rc == 3 and "Install the fabric manager at the driver's version (dnf)" in tasks, tasks
    rc, _tasks = _drift(tmp_path, "--fix")
    assert rc == 0
    pkgs, locks, active = probe()
    assert (pkgs.get("nvidia-fabric-manager"), locks, active) == (
        f"{DRIVER}-1", [f"nvidia-fabric-manager-0:{DRIVER}-1.*"], "active")
    assert _drift(tmp_path) == (0, [])


def test_a_locked_older_fabric_manager_is_replaced_only_on_consent(converged):
    """Driver 550.54.15, the fabric manager 550.54.14 installed and locked by hand: refused without
    nvidia_fabric_manager_allow_replace; --check with it changes nothing; with it the old lock goes,
    550.54.15 is installed and locked."""
    old = f"{DRIVER.rsplit('.', 1)[0]}.14-1"
    ssh(RPM_HOST, "systemctl stop nvidia-fabricmanager; dnf -q versionlock delete nvidia-fabric-manager; "
                  f"dnf -q -y downgrade nvidia-fabric-manager-{old}; "
                  f"dnf -q versionlock add nvidia-fabric-manager-{old}")
    assert probe()[:2] == ({"gpg-pubkey": probe()[0]["gpg-pubkey"], "nvidia-fabric-manager": old},
                           [f"nvidia-fabric-manager-0:{old}.*"])
    refused = fabric_manager("--limit", RPM_HOST)
    assert refused.rc != 0, refused.stdout[-2000:]
    assert "set nvidia_fabric_manager_allow_replace=true" in refused.stdout, refused.stdout[-2000:]
    consent = ("-e", "nvidia_fabric_manager_allow_replace=true")
    check = fabric_manager("--limit", RPM_HOST, "--check", *consent)
    assert check.rc == 0 and check.hosts[RPM_HOST]["changed"] > 0, check.stdout[-3000:]
    assert probe()[0]["nvidia-fabric-manager"] == old
    run = fabric_manager("--limit", RPM_HOST, *consent)
    assert run.rc == 0, run.stdout[-3000:]
    pkgs, locks, active = probe()
    assert (pkgs["nvidia-fabric-manager"], locks, active) == (
        f"{DRIVER}-1", [f"nvidia-fabric-manager-0:{DRIVER}-1.*"], "active")


def _tampered_copy(name: str, resign: bool) -> str:
    """A copy of the lab's RPM repository served beside it: repomd.xml altered after signing, or every
    package re-signed with another key (its metadata signed again with the lab's key, so only the
    package signatures are wrong). Returns its URL."""
    from fabricops_lab import paths, rpm_repo

    src = paths.repo_dir() / rpm_repo.SERVED_PATH / "x86_64"
    dst = paths.repo_dir() / "rpm" / "tampered" / name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    if resign:
        other = paths.STATE_DIR / "rpm-signing-other"
        rpm_repo.sign(sorted((dst / "Packages").glob("*.rpm")), other)
        import subprocess

        subprocess.run(["createrepo_c", "--update", "--quiet", str(dst)], check=True)
        (dst / "repodata" / "repomd.xml.asc").unlink()
        home, fpr = rpm_repo.signing_key()
        from fabricops_lab import ofed_repo

        with ofed_repo._agent(home):
            ofed_repo._gpg(home, "--local-user", fpr, "--armor", "--detach-sign", "-o",
                           str(dst / "repodata" / "repomd.xml.asc"), str(dst / "repodata" / "repomd.xml"))
    else:
        repomd = dst / "repodata" / "repomd.xml"
        repomd.write_text(repomd.read_text().replace("<revision>", "<revision>9"))
    return f"http://198.51.100.1:8080/rpm/tampered/{name}/"


@pytest.mark.parametrize("resign", [False, True], ids=["metadata-altered", "packages-resigned"])
def test_dnf_refuses_a_tampered_repository(converged, resign):
    url = _tampered_copy("resigned" if resign else "metadata", resign)
    ssh(RPM_HOST, "systemctl stop nvidia-fabricmanager; dnf -q versionlock delete nvidia-fabric-manager; "
                  "dnf -q -y remove nvidia-fabric-manager")
    try:
        run = fabric_manager("--limit", RPM_HOST, "-e", f"nvidia_fabric_manager_repo_url={url}")
        assert run.rc != 0 and run.hosts[RPM_HOST]["failures"] == 1, run.stdout[-3000:]
        assert "nvidia-fabric-manager" not in probe()[0]
        # EL 9's dnf.conf (skip_if_unavailable=False, the rpm variant's): a repository whose repomd.xml
        # signature fails stops dnf, rather than being skipped ("No match for argument")
        # packages signed by a key the .repo does not name: ansible.builtin.dnf's words (the dnf CLI says
        # "... are already installed but they are not correct for this package", "GPG check FAILED")
        want = ("Failed to validate GPG signature for nvidia-fabric-manager-" if resign
                else "repomd.xml GPG signature verification error")
        assert want in run.stdout, run.stdout[-3000:]
    finally:
        back = fabric_manager("--limit", RPM_HOST)
    assert back.rc == 0, back.stdout[-3000:]
    assert probe()[0].get("nvidia-fabric-manager") == f"{DRIVER}-1"
