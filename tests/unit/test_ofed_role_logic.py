"""fabricops.ofed: the mlnx_ofed role's decisions (versions, input, kernel, distro, installer, restart)."""

from __future__ import annotations

import pytest

from fabricops import ofed
from fabricops.errors import ParseError

V_OLD, V_NEW = "23.10-1.1.9.0", "24.10-1.1.4.0"
SHA = "ff1857c951d28c93bdb6d0fbff9c8b642e4064f58d89591204eb9fa10eb42483"
TGZ = f"http://198.51.100.1:8080/MLNX_OFED-{V_NEW}/MLNX_OFED_LINUX-{V_NEW}-debian12.1-x86_64.tgz"


# --- versions -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("stdout", "rc", "want"), [
    (f"MLNX_OFED_LINUX-{V_NEW}:\n", 0, V_NEW),
    (f"MLNX_OFED_LINUX-{V_OLD}\n", 0, V_OLD),
    ("OFED-internal-24.10-1.1.4:\r\n", 0, "24.10-1.1.4"),
    ("", 2, None),                                       # command module: no such file
    ("/bin/sh: 1: ofed_info: not found\n", 127, None),
    ("", 0, None),
])
def test_installed_version(stdout, rc, want):
    assert ofed.installed_version(stdout, rc) == want


def test_installed_version_refuses_garbage():
    with pytest.raises(ParseError):
        ofed.installed_version("hca_id: mlx5_0\n", 0)


@pytest.mark.parametrize(("installed", "wanted", "action"), [
    (None, V_NEW, "install"),
    (V_NEW, V_NEW, "none"),
    (V_OLD, V_NEW, "upgrade"),
    (V_NEW, V_OLD, "downgrade"),
    ("5.8-1.0.1.1", "5.8-1.1.2.1", "upgrade"),
    ("24.10-1.1.4.0", "24.10-1.1.4.10", "upgrade"),     # numeric, not string, order
])
def test_install_action(installed, wanted, action):
    assert ofed.install_action(installed, wanted) == action


def test_version_key_orders_numerically():
    assert ofed.version_key("24.10-1.1.4.10") > ofed.version_key("24.10-1.1.4.9")
    assert ofed.version_key("5.8-1.0.1.1") < ofed.version_key("23.10-1.1.9.0")
    with pytest.raises(ofed.OfedInputError):
        ofed.version_key("latest")


@pytest.mark.parametrize(("url", "name"), [
    (TGZ, f"MLNX_OFED_LINUX-{V_NEW}-debian12.1-x86_64"),
    (TGZ.replace(".tgz", ".iso"), f"MLNX_OFED_LINUX-{V_NEW}-debian12.1-x86_64"),
    ("https://x/MLNX_OFED_LINUX-5.8-1.0.1.1-ubuntu22.04-x86_64.tar.gz?token=1",
     "MLNX_OFED_LINUX-5.8-1.0.1.1-ubuntu22.04-x86_64"),
])
def test_dist_dir(url, name):
    assert ofed.dist_dir(url) == name


# --- input ----------------------------------------------------------------------------------------

def test_input_ok_for_each_method():
    assert ofed.input_errors(V_NEW, "tarball", tarball_url=TGZ, tarball_sha256=SHA) == []
    assert ofed.input_errors(V_NEW, "iso", iso_url=TGZ.replace(".tgz", ".iso"), iso_sha256=SHA.upper()) == []
    # a signed mirror (issue 15): the key from a URL with its sha256, a keyring on the host, or the
    # explicit unsigned opt-in
    repo = "http://m/repo/24.10-1.1.4.0"
    assert ofed.input_errors(V_NEW, "repo", repo_url=repo, repo_key_url=f"{repo}/key.gpg",
                             repo_key_sha256=SHA) == []
    assert ofed.input_errors(V_NEW, "repo", repo_url=repo, repo_signed_by="/usr/share/keyrings/m.gpg") == []
    assert ofed.input_errors(V_NEW, "repo", repo_url=repo, repo_trusted=True) == []


def test_repo_without_a_key_or_the_trusted_opt_in_is_refused():
    (err,) = ofed.input_errors(V_NEW, "repo", repo_url="http://m/repo/24.10-1.1.4.0")
    assert err.startswith("the MLNX_OFED mirror needs its signing key") and "mlnx_ofed_repo_trusted" in err
    (err,) = ofed.input_errors(V_NEW, "repo", repo_url="http://m", repo_key_url="http://m/key.gpg")
    assert err.startswith("mlnx_ofed_repo_key_sha256 is not a sha256")
    (err,) = ofed.input_errors(V_NEW, "repo", repo_url="http://m", repo_trusted=True,
                               repo_signed_by="/k.gpg")
    assert err.startswith("set either mlnx_ofed_repo_trusted")
    assert ofed.repo_keyring(None, "http://m/key.gpg") == "/etc/apt/keyrings/mlnx_ofed.gpg"
    assert ofed.repo_keyring("/k.gpg", "http://m/key.gpg") == "/k.gpg" and ofed.repo_keyring() is None


def test_version_without_checksum_is_refused_in_one_line():
    errors = ofed.input_errors(V_NEW, "tarball", tarball_url=TGZ, tarball_sha256="")
    assert len(errors) == 1
    assert errors[0].startswith("mlnx_ofed_tarball_sha256 is not set")
    assert "\n" not in errors[0]
    errors = ofed.input_errors(V_NEW, "iso", iso_url=TGZ.replace(".tgz", ".iso"))
    assert errors == [e for e in errors if e.startswith("mlnx_ofed_iso_sha256 is not set")] and errors


@pytest.mark.parametrize(("kwargs", "start"), [
    ({"version": None, "method": "tarball", "tarball_url": TGZ, "tarball_sha256": SHA},
     "mlnx_ofed_version is not set"),
    ({"version": "latest", "method": "tarball", "tarball_url": TGZ, "tarball_sha256": SHA},
     "mlnx_ofed_version 'latest'"),
    ({"version": V_NEW, "method": "rpm"}, "mlnx_ofed_install_method 'rpm'"),
    ({"version": V_NEW, "method": "tarball", "tarball_sha256": SHA}, "mlnx_ofed_tarball_url is not set"),
    ({"version": V_NEW, "method": "tarball", "tarball_url": TGZ, "tarball_sha256": "abc"},
     "mlnx_ofed_tarball_sha256 'abc' is not a sha256"),
    ({"version": V_OLD, "method": "tarball", "tarball_url": TGZ, "tarball_sha256": SHA},
     "mlnx_ofed_tarball_url does not name version 23.10-1.1.9.0"),
    ({"version": V_NEW, "method": "repo"}, "mlnx_ofed_repo_url is not set"),
    ({"version": V_NEW, "method": "repo", "repo_url": "http://m", "add_kernel_support": True},
     "mlnx_ofed_add_kernel_support needs the tarball or iso method"),
    ({"version": V_NEW, "method": "repo", "repo_url": "http://m", "distro": "debian12.1",
      "skip_distro_check": True}, "set either mlnx_ofed_distro or mlnx_ofed_skip_distro_check"),
    ({"version": V_NEW, "method": "repo", "repo_url": "http://m", "restart_method": "kexec"},
     "mlnx_ofed_restart_method 'kexec'"),
])
def test_input_errors(kwargs, start):
    version, method = kwargs.pop("version"), kwargs.pop("method")
    errors = ofed.input_errors(version, method, **kwargs)
    assert errors and errors[0].startswith(start), errors


# --- kernel ---------------------------------------------------------------------------------------

DEBS = [
    "/var/cache/mlnx_ofed/X/DEBS/ofed-scripts_24.10.OFED.24.10.1.1.4_amd64.deb",
    "/var/cache/mlnx_ofed/X/DEBS/mlnx-ofed-kernel-modules_24.10.OFED.24.10.1.1.4.0.kver.6.1.0-18-amd64_amd64.deb",
    "mlnx-ofed-kernel-dkms_24.10.OFED.24.10.1.1.4.0_all.deb",
]
APT_SHOW = """Package: mlnx-ofed-all
Version: 24.10-1.1.4.0
Depends: ofed-scripts (= 24.10.OFED.24.10.1.1.4), mlnx-tools (= 24.10.0), mlnx-ofed-kernel-utils (= 24.10.OFED.24.10.1.1.4.0), mlnx-ofed-kernel-modules (= 24.10.OFED.24.10.1.1.4.0.kver.5.15.0-91-generic) | mlnx-ofed-kernel-dkms (= 24.10.OFED.24.10.1.1.4.0), rdma-core (= 2410mlnx54-1.24101140)
"""  # noqa: E501


def test_kernels_recorded_by_the_distribution():
    assert ofed.kernels_from_debs(DEBS) == ["6.1.0-18-amd64"]
    el8 = "mlnx-ofed-kernel-modules_5.8.OFED.5.8.1.0.1.1.kver.4.18.0-425.3.1.el8_amd64.deb"
    assert ofed.kernels_from_debs([el8]) == ["4.18.0-425.3.1.el8"]
    assert ofed.kernels_from_depends(APT_SHOW) == ["5.15.0-91-generic"]
    assert ofed.kernels_from_debs([]) == [] and ofed.kernels_from_depends("") == []


def test_kernel_check_matches_and_refuses():
    assert ofed.kernel_check("6.1.0-18-amd64", ["6.1.0-18-amd64"], False) == \
        {"ok": True, "add_kernel_support": False, "error": None}
    # '_' in a kernel name is written '-' in Debian package versions
    assert ofed.kernel_check("4.18.0_425", ["4.18.0-425"], False)["ok"]
    bad = ofed.kernel_check("6.1.0-20-amd64", ["6.1.0-18-amd64"], False, "tarball", V_NEW)
    assert not bad["ok"]
    assert "built for kernel 6.1.0-18-amd64 but this host runs 6.1.0-20-amd64" in bad["error"]
    assert "mlnx_ofed_add_kernel_support: true" in bad["error"]
    aks = ofed.kernel_check("6.1.0-20-amd64", ["6.1.0-18-amd64"], True, "iso")
    assert aks == {"ok": True, "add_kernel_support": True, "error": None}
    repo = ofed.kernel_check("6.1.0-20-amd64", ["6.1.0-18-amd64"], True, "repo")
    assert not repo["ok"] and "tarball or iso" in repo["error"]
    assert not ofed.kernel_check("6.1.0-18-amd64", [], False)["ok"]


# --- distro ---------------------------------------------------------------------------------------

def test_distro_check():
    assert ofed.distro_check("debian12.1", "debian12.1") == {"args": [], "error": None}
    refused = ofed.distro_check("debian12.11", "debian12.1")
    assert refused["error"] and "mlnx_ofed_distro: debian12.1" in refused["error"]
    assert "intended for debian12.1" in refused["error"]
    assert ofed.distro_check("debian12.11", "debian12.1", "debian12.1") == \
        {"args": ["--distro", "debian12.1"], "error": None}
    assert ofed.distro_check("debian12.11", "debian12.1", skip=True) == \
        {"args": ["--skip-distro-check"], "error": None}
    assert "not the distro" in ofed.distro_check("debian12.11", "debian12.1", "debian12.5")["error"]
    assert "same OS and major" in ofed.distro_check("debian11.9", "debian12.1", "debian12.1")["error"]
    assert "same OS and major" in ofed.distro_check("ubuntu22.04", "debian12.1", "debian12.1")["error"]
    assert ofed.distro_check("debian12.11", "skip-distro-check") == {"args": [], "error": None}


# --- installer ------------------------------------------------------------------------------------

def test_installer_args_are_non_interactive():
    assert ofed.installer_args() == ["--force", "--without-fw-update"]
    assert ofed.installer_args(distro_args=["--distro", "debian12.1"], add_kernel_support=True,
                               tmpdir="/var/cache/mlnx_ofed/tmp", extra=["--hpc", "--force"]) == \
        ["--force", "--without-fw-update", "--distro", "debian12.1", "--add-kernel-support",
         "--tmpdir", "/var/cache/mlnx_ofed/tmp", "--hpc"]
    assert ofed.installer_args(fw_update=True) == ["--force"]


OK_OUT = """Logs dir: /tmp/MLNX_OFED_LINUX.123.logs
General log file: /tmp/MLNX_OFED_LINUX.123.logs/general.log
Installing new packages
Skipping FW update.

Installation passed successfully
To load the new driver, run:
/etc/init.d/openibd restart
"""


def test_installer_result():
    assert ofed.installer_result(0, OK_OUT) == {"ok": True, "restart_needed": True, "error": None}
    assert ofed.installer_result(0, "Installation passed successfully\n")["restart_needed"] is False
    kernel = ofed.installer_result(172, "The 6.1.0-20-amd64 kernel is installed, MLNX_OFED_LINUX does not "
                                        "have drivers available for this kernel.\nYou can run ...\n")
    assert not kernel["ok"] and "exit 172" in kernel["error"] and "6.1.0-20-amd64 kernel" in kernel["error"]
    distro = ofed.installer_result(
        1, "Logs dir: x\nError: The current MLNX_OFED_LINUX is intended for debian12.1\n")
    assert "intended for debian12.1" in distro["error"] and "mlnx_ofed_distro" in distro["error"]
    bad = ofed.installer_result(22, "Unsupported option: --bogus\n\nUsage: ...\n")
    assert "Unsupported option: --bogus" in bad["error"]
    dpkg = ofed.installer_result(1, "General log file: /tmp/L/general.log\nFailed to install MLNX_OFED_LINUX "
                                    "DEBs\nSee /tmp/L/general.log\n")
    assert "Failed to install MLNX_OFED_LINUX DEBs" in dpkg["error"] and "/tmp/L/general.log" in dpkg["error"]


# --- /proc/modules ----------------------------------------------------------------------------------

PROC_MODULES = """nvme_rdma 45056 0 - Live 0x0000000000000000
nvme_fabrics 32768 1 nvme_rdma, Live 0x0000000000000000
rpcrdma 294912 0 - Live 0x0000000000000000
rdma_ucm 28672 0 - Live 0x0000000000000000
rdma_cm 122880 3 nvme_rdma,rpcrdma,rdma_ucm, Live 0x0000000000000000
iw_cm 49152 1 rdma_cm, Live 0x0000000000000000
ib_cm 131072 1 rdma_cm, Live 0x0000000000000000
ib_ipoib 135168 0 - Live 0x0000000000000000
mlx5_ib 393216 0 - Live 0x0000000000000000
ib_uverbs 163840 2 rdma_ucm,mlx5_ib, Live 0x0000000000000000
lustre_helper 16384 0 - Live 0x0000000000000000
ko2iblnd 237568 1 lustre_helper, Live 0x0000000000000000 (OE)
nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)
ib_core 425984 11 nvme_rdma,rpcrdma,rdma_ucm,rdma_cm,iw_cm,ib_cm,ib_ipoib,mlx5_ib,ib_uverbs,ko2iblnd,nvidia_peermem, Live 0x0000000000000000
mlx5_core 2121728 1 mlx5_ib, Live 0x0000000000000000
ext4 1007616 2 - Live 0x0000000000000000
"""  # noqa: E501


def test_parse_proc_modules():
    mods = ofed.parse_proc_modules(PROC_MODULES)
    assert mods["rdma_cm"].used_by == ["nvme_rdma", "rpcrdma", "rdma_ucm"]
    assert mods["rdma_cm"].refcount == 3 and mods["nvme_rdma"].used_by == []
    assert mods["ib_core"].size == 425984
    with pytest.raises(ParseError):
        ofed.parse_proc_modules("this is not /proc/modules\n")


def test_stack_holders_users_first():
    holders = ofed.stack_holders(PROC_MODULES)
    assert set(holders) == {"nvme_rdma", "rpcrdma", "ko2iblnd", "lustre_helper", "nvidia_peermem"}
    # lustre_helper uses ko2iblnd: it must be unloaded first
    assert holders.index("lustre_helper") < holders.index("ko2iblnd")
    assert "nvme_fabrics" not in holders and "ext4" not in holders  # used by a holder / unrelated


def test_no_holders():
    clean = (
        "rdma_cm 122880 1 rdma_ucm, Live 0x0\n"
        "rdma_ucm 28672 0 - Live 0x0\n"
        "ib_core 425984 2 rdma_cm,rdma_ucm, Live 0x0\n"
        "mlx5_core 2121728 0 - Live 0x0\n"
        "ext4 1007616 2 - Live 0x0\n"
    )
    assert ofed.stack_holders(clean) == []
    assert ofed.stack_holders("") == []                      # no /proc/modules (no loadable modules)
    assert "nvme_rdma (NVMe over Fabrics (RDMA) initiator)" in ofed.describe_holders(["nvme_rdma"])


# --- restart ----------------------------------------------------------------------------------------

def test_pending_marker_lives_until_reboot():
    marker = "boot-a\tMLNX_OFED 24.10 was installed\n"
    assert ofed.pending_from_marker(marker, "boot-a") == "MLNX_OFED 24.10 was installed"
    assert ofed.pending_from_marker(marker, "boot-b") is None
    assert ofed.pending_from_marker("", "boot-a") is None
    assert ofed.pending_from_marker(None, "boot-a") is None


def test_restart_reasons():
    assert ofed.restart_reasons(False, "none", V_NEW, [], None) == []
    r = ofed.restart_reasons(True, "upgrade", V_NEW, ["RUN_AFFINITY_TUNER", "ONBOOT"], "earlier")
    assert r[0] == "earlier"
    assert "To load the new driver" in r[1]
    assert r[2].startswith("openib.conf changed (RUN_AFFINITY_TUNER)")
    assert ofed.restart_reasons(False, "none", V_NEW, ["ONBOOT"], None) == []   # read at boot only
    assert "from the mirror" in ofed.restart_reasons(True, "upgrade", V_NEW, [], None, "repo")[0]


@pytest.mark.parametrize(("kwargs", "action", "unload", "says"), [
    ({}, "pending", [], "mlnx_ofed_allow_restart: true"),
    ({"allow_restart": True}, "openibd", [], "restarting openibd"),
    ({"allow_restart": True, "holders": ["nvme_rdma"]}, "refuse", ["nvme_rdma"], "nvme_rdma (NVMe"),
    ({"allow_restart": True, "holders": ["nvme_rdma"], "allow_unload_users": True}, "openibd", ["nvme_rdma"],
     "after unloading nvme_rdma"),
    ({"allow_restart": True, "holders": ["nvme_rdma"], "allow_reboot": True}, "reboot", [],
     "rebooting instead"),
    ({"method": "reboot"}, "pending", [], "a reboot is pending"),
    ({"method": "reboot", "allow_reboot": True}, "reboot", [], "rebooting"),
    ({"holders": ["rpcrdma"]}, "pending", [], "rpcrdma (NFS over RDMA) hold"),
])
def test_restart_plan(kwargs, action, unload, says):
    plan = ofed.restart_plan(["MLNX_OFED installed"], host="gpu02", **kwargs)
    assert plan["action"] == action
    assert plan["unload"] == unload
    assert says in plan["message"] and plan["message"].startswith("gpu02: ")


def test_nothing_to_restart():
    assert ofed.restart_plan([], allow_restart=True, holders=["nvme_rdma"]) == \
        {"action": "none", "unload": [], "message": ""}
    assert ofed.restart_plan(["", None])["action"] == "none"
