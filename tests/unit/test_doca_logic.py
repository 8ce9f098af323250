"""fabricops.doca and the DOCA-Host parts of fabricops.ofed: the mlnx_ofed role's method doca
(input, repository, stack change, next-boot kernel, DKMS gaps, Secure Boot, restart reasons)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from captures import read_fixture

from fabricops import doca, ofed
from fabricops.errors import ParseError
from fabricops.parsers import dkms

SHA = "ff1857c951d28c93bdb6d0fbff9c8b642e4064f58d89591204eb9fa10eb42483"
MIRROR = "http://198.51.100.1:8080/doca/2.9.1/debian12/x86_64/"
OK = {"version": "2.9.1", "profile": "doca-ofed", "repo_url": MIRROR,
      "key_url": "http://198.51.100.1:8080/doca/GPG-KEY-Mellanox.pub", "key_sha256": SHA}
K18, K21 = "6.1.0-18-amd64", "6.1.0-21-amd64"
OFED = "mlnx-ofed-kernel"


def _rec(module, kernel, state="installed", version="24.10.OFED.24.10.1.1.4.1"):
    # SPEC-20 A4 shape (fabricops.parsers.dkms.parse_status)
    return {"module": module, "version": version, "kernel": kernel, "arch": "x86_64", "state": state,
            "warnings": []}


# --- input ----------------------------------------------------------------------------------------

def test_doca_input_ok_and_mlnx_ofed_version_not_needed():
    assert doca.input_errors(**OK) == []
    assert ofed.input_errors(None, "doca", doca=OK) == []
    assert "doca" in ofed.METHODS
    # the other methods still need mlnx_ofed_version
    assert ofed.input_errors(None, "repo", repo_url="http://m/r", repo_trusted=True)[0].startswith(
        "mlnx_ofed_version is not set")


@pytest.mark.parametrize(("change", "start"), [
    ({"version": ""}, "mlnx_ofed_doca_version is not set"),
    ({"version": "2.9"}, "mlnx_ofed_doca_version '2.9' is not a DOCA release"),
    ({"version": "2.9.1\n"}, "mlnx_ofed_doca_version '2.9.1\\n' is not a DOCA release"),
    ({"version": "latest"}, "mlnx_ofed_doca_version 'latest' is not a DOCA release"),
    ({"profile": "doca-everything"},
     "mlnx_ofed_doca_profile 'doca-everything' is not one of doca-ofed, doca-roce"),
    ({"repo_url": "http://m/doca/2.9.0/debian12/x86_64/"},
     "mlnx_ofed_doca_repo_url does not name DOCA 2.9.1"),
    ({"repo_url": "http://m/doca/2.9.1/x;id"}, "mlnx_ofed_doca_repo_url 'http://m/doca/2.9.1/x;id' is not"),
    ({"key_url": "", "key_sha256": ""}, "the DOCA repository needs its signing key"),
    ({"key_sha256": "abc"}, "mlnx_ofed_doca_repo_key_sha256 is not a sha256"),
    ({"dkms_kernels": ["running", "6.1.0-21-amd64; reboot"]}, "mlnx_ofed_dkms_kernels entry"),
    ({"secure_boot_enroll": True}, "mlnx_ofed_secure_boot_enroll: true needs mlnx_ofed_mok_password"),
])
def test_doca_input_errors(change, start):
    errors = ofed.input_errors(None, "doca", doca={**OK, **change})
    assert errors and errors[0].startswith(start), errors
    assert all("\n" not in e.replace("\\n", "") for e in errors)  # one line each


def test_signed_by_alone_and_password_with_enroll_are_fine():
    assert doca.input_errors("2.9.1", "doca-roce", signed_by="/etc/apt/keyrings/doca.gpg") == []
    assert doca.input_errors("2.9.1", "doca-all", signed_by="/k", secure_boot_enroll=True,
                             mok_password="s3cret") == []


# --- repository -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "url"), [
    (("2.9.1", "Debian", "12", "12.11", "x86_64"), "https://linux.mellanox.com/public/repo/doca/2.9.1/debian12/x86_64/"),
    (("3.2.0", "Ubuntu", "22", "22.04", "aarch64"),
     "https://linux.mellanox.com/public/repo/doca/3.2.0/ubuntu22.04/arm64-sbsa/"),
    (("2.9.1", "Debian", "12", "12.11", "x86_64", MIRROR.rstrip("/")), MIRROR),
])
def test_repo_url(args, url):
    assert doca.repo_url(*args) == url


def test_repo_url_refuses_an_os_nvidia_does_not_publish():
    with pytest.raises(ValueError, match="set mlnx_ofed_doca_repo_url"):
        doca.repo_url("2.9.1", "Gentoo", "2", "2.15", "x86_64")


# Captured on Debian 12 (apt 2.6.1) with a flat file: repository holding doca-ofed 2.9.1-1
# ("deb [trusted=yes] file:///tmp/x/repo/ ./"): apt prints the URI as file:/path, no trailing '/'.
MADISON_FILE = " doca-ofed |    2.9.1-1 | file:/tmp/x/repo ./ Packages\n"
MADISON_HTTP = (" doca-ofed | 2.9.1-1 | http://198.51.100.1:8080/doca/2.9.1/debian12/x86_64 ./ Packages\n"
                " doca-ofed | 2.10.0-1 | http://198.51.100.1:8080/doca/2.10.0/debian12/x86_64 ./ Packages\n")


def test_madison_version_is_the_repositorys_own():
    assert doca.madison_version(MADISON_FILE, "file:///tmp/x/repo/") == "2.9.1-1"
    assert doca.madison_version(MADISON_HTTP, MIRROR) == "2.9.1-1"
    assert doca.madison_version(MADISON_HTTP, MIRROR.replace("2.9.1", "2.10.0")) == "2.10.0-1"
    assert doca.madison_version(MADISON_HTTP, "http://other/doca/2.9.1/debian12/x86_64/") is None
    assert doca.madison_version("", MIRROR) is None


# --- versions and the stack -----------------------------------------------------------------------

@pytest.mark.parametrize(("a", "b"), [  # a < b, as dpkg --compare-versions says (checked against dpkg 1.21)
    ("6.1.0-18-amd64", "6.1.0-21-amd64"),
    ("6.1.0-21", "6.1.0-21+"),
    ("6.1.0-9-amd64", "6.1.0-10-amd64"),
    ("6.9.0-1-amd64", "6.10.0-1-amd64"),
    ("6.1.0-21-amd64", "6.1.0-21-rt-amd64"),
    ("2.0~rc1", "2.0"),
    ("2.9.1-1", "2.10.0-1"),
    ("9.9", "1:0.1"),
    ("1.0a", "1.0+"),          # letters sort before other characters
    ("1.0-2", "1.0+1"),        # the revision after the last '-' is compared after the upstream part
])
def test_debian_compare(a, b):
    assert doca.debian_compare(a, b) < 0 < doca.debian_compare(b, a)
    assert doca.debian_compare(a, a) == 0


@pytest.mark.parametrize(("stdout", "kind"), [
    ("MLNX_OFED_LINUX-24.10-1.1.4.0:\n", "mlnx_ofed"),
    ("OFED-internal-24.10-1.1.4:\n", "doca"),
    ("", None),
    ("24.10-1.1.4.0\n", None),          # ofed_info -n: a bare version does not say which stack
    ("/bin/sh: 1: ofed_info: not found\n", None),
])
def test_stack_kind(stdout, kind):
    assert doca.stack_kind(stdout) == kind


def test_stack_kind_refuses_garbage():
    with pytest.raises(ParseError):
        doca.stack_kind("hca_id: mlx5_0\n")


def test_stack_change_needs_consent():
    refused = doca.stack_change("mlnx_ofed", "24.10-1.1.4.0", doca_version="2.9.1", profile="doca-ofed",
                                allow=False, host="gpu01")
    assert refused["action"] == "refuse"
    msg = refused["message"]
    assert msg.startswith("gpu01: this host runs standalone MLNX_OFED 24.10-1.1.4.0;")
    assert "mlnx_ofed_allow_stack_change: true" in msg and "/usr/sbin/ofed_uninstall.sh --force" in msg
    assert msg.count(". ") == 0  # one sentence
    ok = doca.stack_change("mlnx_ofed", "24.10-1.1.4.0", doca_version="2.9.1", profile="doca-ofed",
                           allow=True)
    assert ok == {"action": "replace",
                  "message": "replacing MLNX_OFED 24.10-1.1.4.0 with DOCA-Host 2.9.1 (doca-ofed)"}
    for kind in ("doca", None):
        none = doca.stack_change(kind, None, doca_version="2.9.1", profile="doca-ofed", allow=False)
        assert none["action"] == "none"


@pytest.mark.parametrize(("stdout", "rc", "version"), [
    ("ii 2.9.1-1\n", 0, "2.9.1-1"),
    ("hi 2.9.1-1\n", 0, "2.9.1-1"),     # held and installed
    ("un \n", 0, None),                  # known, not installed
    ("rc 2.9.1-1\n", 0, None),           # removed, config files left
    ("", 1, None),                        # dpkg-query: no packages found matching doca-ofed
])
def test_installed_package_version(stdout, rc, version):
    assert doca.installed_package_version(stdout, rc) == version


def _state(ofed_out, dpkg_out, madison=MADISON_HTTP, allow=False):
    return doca.state(ofed_out, 0, dpkg_out, 0 if dpkg_out else 1, madison, MIRROR, doca_version="2.9.1",
                      profile="doca-ofed", allow_stack_change=allow, host="gpu01")


def test_state_is_idempotent_by_the_installed_profile_version():
    s = _state("OFED-internal-24.10-1.1.4:\n", "hi 2.9.1-1\n")
    assert (s["stack"], s["installed"], s["available"], s["action"]) == ("doca", "2.9.1-1", "2.9.1-1", "none")
    assert _state("OFED-internal-24.10-1.1.4:\n", "hi 2.8.0-1\n")["action"] == "upgrade"
    assert _state("OFED-internal-24.10-1.1.4:\n", "hi 2.10.0-1\n")["action"] == "downgrade"
    assert _state("", "")["action"] == "install"
    # the source is not configured yet (no line from this URL): the repository's version is unknown
    assert _state("OFED-internal-24.10-1.1.4:\n", "hi 2.8.0-1\n", madison="")["action"] == "update"
    assert _state("", "", madison="")["action"] == "install"
    # profile recorded but ofed_info does not show DOCA-OFED: repair, never 'none'
    assert _state("", "ii 2.9.1-1\n")["action"] == "install"


def test_state_replaces_mlnx_ofed_only_with_consent():
    s = _state("MLNX_OFED_LINUX-24.10-1.1.4.0:\n", "")
    assert s["action"] == "replace" and s["stack_change"]["action"] == "refuse"
    assert s["stack_version"] == "24.10-1.1.4.0"
    assert _state("MLNX_OFED_LINUX-24.10-1.1.4.0:\n", "", allow=True)["stack_change"]["action"] == "replace"


# --- kernels and DKMS -----------------------------------------------------------------------------

@pytest.mark.parametrize(("names", "running", "nxt"), [
    (["/boot/vmlinuz-6.1.0-18-amd64", "/boot/vmlinuz-6.1.0-21-amd64"], K18, K21),
    (["/boot/vmlinuz-6.1.0-21-amd64", "/boot/vmlinuz-6.1.0-18-amd64"], K18, K21),   # order of find
    (["vmlinuz-6.1.0-21", "vmlinuz-6.1.0-21+", "vmlinuz-6.1.0-18"], "6.1.0-18", "6.1.0-21+"),
    (["vmlinuz-6.9.0-1-amd64", "vmlinuz-6.10.0-1-amd64"], "6.9.0-1-amd64", "6.10.0-1-amd64"),
    (["vmlinuz-6.1.0-9-amd64", "vmlinuz-6.1.0-10-amd64"], "6.1.0-9-amd64", "6.1.0-10-amd64"),
    (["vmlinuz-6.1.0-21-amd64", "vmlinuz-6.1.0-21-rt-amd64"], K21, "6.1.0-21-rt-amd64"),
    (["vmlinuz-6.1.0-18-rt-amd64", "vmlinuz-6.1.0-21-amd64"], "6.1.0-18-rt-amd64", K21),
    (["/boot/vmlinuz", "/boot/vmlinuz.old", "/boot/vmlinuz-6.1.0-18-amd64"], K18, K18),  # links ignored
    ([], K18, K18),                                                                     # nothing: running
])
def test_next_boot_kernel_is_the_newest_by_debian_order(names, running, nxt):
    assert doca.next_boot_kernel(names, running) == nxt


def test_dkms_kernels():
    assert doca.dkms_kernels(["running", "next"], K18, K21) == [K18, K21]
    assert doca.dkms_kernels(["running", "next"], K18, K18) == [K18]
    assert doca.dkms_kernels(["next", "6.1.0-99-amd64"], K18, K21) == [K21, "6.1.0-99-amd64"]


def test_dkms_gaps():
    status = [_rec(OFED, K18), _rec(OFED, K21, "built"), _rec("knem", K18), _rec("nvidia", K21)]
    mods = doca.stack_dkms_modules(status)
    assert mods == [OFED, "knem"]          # nvidia's DKMS module is not this stack's
    assert doca.dkms_gaps(status, mods, [K18, K21]) == [
        {"module": OFED, "kernel": K21, "state": "built"},
        {"module": "knem", "kernel": K21, "state": "missing"},
    ]
    assert doca.dkms_gaps(status, mods, [K18]) == []
    assert doca.dkms_gaps([], [OFED], [K18]) == [{"module": OFED, "kernel": K18, "state": "missing"}]
    # dkms 'added' without a kernel counts for no kernel
    assert doca.dkms_gaps([_rec(OFED, None, "added")], [OFED], [K18])[0]["state"] == "missing"


def test_dkms_gaps_on_a_real_capture():
    # dkms 2.x: amdgpu 19.10 only built (not installed) for 3.10.0-957, 2.4 installed for both kernels
    status = dkms.parse_status(read_fixture("dkms-status", "dkms2_rocm_built_original_module.txt"))
    assert doca.dkms_gaps(status, ["amdgpu"], ["3.10.0-957.el7.x86_64", "3.10.0-957.12.2.el7.x86_64"]) == []
    assert doca.dkms_gaps(status, ["amdgpu"], ["3.10.0-1062.el7.x86_64"]) == [
        {"module": "amdgpu", "kernel": "3.10.0-1062.el7.x86_64", "state": "missing"}]


def test_dkms_plan_after_a_kernel_upgrade_without_headers():
    status = [_rec(OFED, K18)]
    plan = doca.dkms_plan(status, ["/boot/vmlinuz-6.1.0-18-amd64", "/boot/vmlinuz-6.1.0-21-amd64"], K18,
                          ["running", "next"], [], check_mode=True)
    assert plan["next_boot"] == K21 and plan["kernels"] == [K18, K21]
    assert plan["missing"] == [{"module": OFED, "kernel": K21}]
    assert plan["build"] == [K21] and plan["no_headers"] == [K21]
    assert plan["messages"] == [f"kernel {K21} has no mlnx-ofed-kernel DKMS modules: would build"]
    assert plan["restart_reason"] is None          # the running kernel's modules are there
    with_headers = doca.dkms_plan(status, ["vmlinuz-6.1.0-21-amd64"], K18, ["running", "next"], [K21])
    assert with_headers["no_headers"] == [] and with_headers["messages"][0].endswith(": building")


def test_dkms_missing_for_the_running_kernel_asks_for_a_driver_reload():
    plan = doca.dkms_plan([_rec(OFED, K21)], ["vmlinuz-6.1.0-18-amd64"], K18, ["running", "next"], [K18])
    assert plan["missing"] == [{"module": OFED, "kernel": K18}]
    reason = plan["restart_reason"]
    assert reason and K18 in reason and "openibd restart" in reason
    reasons = ofed.restart_reasons(False, "none", "2.9.1", [], None, "doca", reason)
    assert reasons == [reason]
    pending = ofed.restart_plan(reasons, host="gpu01")
    assert pending["action"] == "pending" and "mlnx_ofed_allow_restart: true" in pending["message"]
    assert ofed.restart_plan(reasons, allow_restart=True)["action"] == "openibd"


def test_prebuilt_mlnx_ofed_is_not_a_dkms_stack():
    plan = doca.dkms_plan([_rec("nvidia", K18)], ["vmlinuz-6.1.0-21-amd64"], K18, ["running", "next"], [],
                          method="tarball")
    assert plan["dkms_stack"] is False and plan["missing"] == [] and plan["restart_reason"] is None
    # ... unless dkms has the stack's modules (an MLNX_OFED installed with DKMS)
    assert doca.dkms_plan([_rec(OFED, K18)], ["vmlinuz-6.1.0-21-amd64"], K18, ["running", "next"], [],
                          method="tarball")["build"] == [K21]


def test_headers_package():
    assert doca.headers_package(K21) == "linux-headers-6.1.0-21-amd64"
    with pytest.raises(ValueError):
        doca.headers_package("6.1.0; rm -rf /")


# --- restart --------------------------------------------------------------------------------------

def test_restart_reasons_for_doca():
    assert ofed.restart_reasons(True, "replace", "2.9.1", [], None, "doca") == [
        "DOCA-Host 2.9.1 packages were installed (replace); the running driver is the previous one until "
        "openibd restarts"]
    # the old methods are unchanged
    assert ofed.restart_reasons(True, "upgrade", "24.10-1.1.4.0", [], None, "repo")[0].startswith(
        "MLNX_OFED 24.10-1.1.4.0 packages were installed from the mirror")


def test_a_queued_mok_enrollment_holds_the_restart_even_with_consent():
    plan = ofed.restart_plan(["x"], allow_restart=True, blocked="the MOK enrollment is queued", host="gpu01")
    assert plan["action"] == "pending" and "the MOK enrollment is queued" in plan["message"]
    assert ofed.restart_plan([], blocked="queued")["action"] == "none"


# --- Secure Boot ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("sb", "key", "enroll", "action"), [
    (False, None, False, "none"),
    (None, None, False, "none"),            # not EFI
    (True, "enrolled", False, "none"),
    (True, "not_enrolled", False, "refuse"),
    (True, None, False, "refuse"),          # no dkms key yet: would be made and signed with, unenrolled
    (True, "not_enrolled", True, "enroll"),
    (True, None, True, "enroll"),
    (True, "queued", False, "pending"),
    (True, "queued", True, "pending"),      # never queued twice
])
def test_secure_boot_plan(sb, key, enroll, action):
    assert doca.secure_boot_plan(sb, key, enroll=enroll)["action"] == action


def test_secure_boot_refusal_says_how_to_enroll():
    msg = doca.secure_boot_plan(True, "not_enrolled", host="gpu01")["message"]
    assert msg.startswith("gpu01: Secure Boot is on and the dkms signing key /var/lib/dkms/mok.pub is not "
                          "enrolled")
    for part in ("mokutil --import /var/lib/dkms/mok.pub", "reboot", "console",
                 "mlnx_ofed_secure_boot_enroll: true"):
        assert part in msg


def _filters():
    path = Path(__file__).resolve().parents[2] / "plugins" / "filter" / "mlnx_ofed.py"
    spec = importlib.util.spec_from_file_location("fabricops_filter_mlnx_ofed_doca", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FilterModule().filters()


def test_secure_boot_filter_reads_the_real_mokutil_output():
    plan = _filters()["mlnx_ofed_secure_boot_plan"]
    enabled = {"rc": 0, "stdout": read_fixture("mokutil-sb-state", "enabled.txt"), "stderr": ""}
    not_efi = {"rc": 255, "stdout": "", "stderr": read_fixture("mokutil-sb-state", "not_efi.txt")}
    enrolled = {"rc": 1, "stdout": read_fixture("mokutil-test-key", "already_enrolled_dkms.txt")}
    not_enrolled = {"rc": 0, "stdout": read_fixture("mokutil-test-key", "not_enrolled_shim_signed.txt")}
    assert plan(enabled, enrolled)["action"] == "none"
    r = plan(enabled, not_enrolled)
    assert (r["action"], r["secure_boot"], r["key"]) == ("refuse", True, "not_enrolled")
    assert plan(enabled, {"skipped": True}, True)["action"] == "enroll"       # no key file yet
    # queued by this role in this boot: test-key already says "enrolled", the kernel still refuses
    assert plan(enabled, enrolled, False, "gpu01", True)["action"] == "pending"
    assert plan(not_efi, {"skipped": True})["secure_boot"] is None
    assert plan({"skipped": True}, {"skipped": True})["action"] == "none"    # no mokutil, no EFI
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="Secure Boot unknown"):
        plan({"rc": 1, "stdout": "", "stderr": "mokutil: command failed"}, {"skipped": True})


def test_dkms_filter_parses_dkms_status():
    plan = _filters()["mlnx_ofed_dkms_plan"]
    status = {"rc": 0, "stdout": f"{OFED}/24.10.OFED.24.10.1.1.4.1, {K18}, x86_64: installed\n"}
    got = plan(status, ["/boot/vmlinuz-6.1.0-18-amd64", "/boot/vmlinuz-6.1.0-21-amd64"], K18,
               ["running", "next"], [], "doca", True)
    assert got["missing"] == [{"module": OFED, "kernel": K21}]
    # dkms not installed yet (check mode before the install): every kernel is reported
    assert plan({"rc": 2, "stdout": ""}, [], K18, ["running", "next"], [])["build"] == [K18]


def test_role_variables_of_the_doca_method_are_validated():
    from fabricops import validate

    good = {"mlnx_ofed_install_method": "doca", "mlnx_ofed_doca_version": "2.9.1",
            "mlnx_ofed_doca_profile": "doca-roce", "mlnx_ofed_dkms_kernels": ["running", "next", K21],
            "mlnx_ofed_mok_password": "any 'thing' $(goes) here; it only reaches stdin"}
    assert validate.role_errors(good) == []
    bad = validate.role_errors({"mlnx_ofed_doca_version": "2.9.1;id", "mlnx_ofed_doca_profile": "doca-x",
                                "mlnx_ofed_dkms_kernels": ["$(id)"]})
    assert len(bad) == 3


def test_doca_apt_source_is_signed():
    import jinja2

    filters = _filters()
    root = Path(__file__).resolve().parents[2] / "roles" / "mlnx_ofed" / "templates"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(root)), undefined=jinja2.StrictUndefined)
    env.filters["fabricops.fabric.mlnx_ofed_doca_keyring"] = filters["mlnx_ofed_doca_keyring"]

    def lines(**ctx):
        text = env.get_template("doca.list.j2").render(ansible_managed="Ansible managed",
                                                       mlnx_ofed_doca_version="2.9.1", **ctx)
        return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]

    assert lines(mlnx_ofed_doca_repo_signed_by="", __mlnx_ofed_doca_url=MIRROR) == [
        f"deb [signed-by=/etc/apt/keyrings/doca.gpg] {MIRROR} ./"]
    assert lines(mlnx_ofed_doca_repo_signed_by="/usr/share/keyrings/d.gpg", __mlnx_ofed_doca_url=MIRROR) == [
        f"deb [signed-by=/usr/share/keyrings/d.gpg] {MIRROR} ./"]
