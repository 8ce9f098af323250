"""verify's SSH transport shares one connection per host (fabricops.verify.transport.Fabric).

testinfra's SSH backend asks for ControlMaster=auto and ControlPersist but names no ControlPath, and
OpenSSH does not multiplex without one: every command of a verify run paid a key exchange and a login
(205 connections in a 4-host run, 40 % of its CPU). The ``ssh`` here is a stand-in on PATH that records
its argument vector, creates the ControlPath socket file a master would, and runs the remote command
locally: what is checked is the command line fabricops hands to OpenSSH, and that the run's sockets
are closed (``ssh -O exit``) and their directory removed.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
import textwrap

import pytest
from testinfra.host import Host

from fabricops.verify.transport import Fabric

FAKE_SSH = textwrap.dedent(
    """\
    #!{python}
    import json, os, re, subprocess, sys
    args = sys.argv[1:]
    with open(os.environ["FAKE_SSH_LOG"], "a") as log:
        log.write(json.dumps(args) + "\\n")
    path = next((m.group(1) for a in args for m in [re.match(r"ControlPath=(.+)", a)] if m), None)
    if "-O" in args:
        if path and os.path.exists(path):
            os.unlink(path)
        sys.exit(0)
    if path and not os.path.exists(path):
        open(path, "w").close()  # the master's socket
    sys.exit(subprocess.run(["sh", "-c", args[-1]]).returncode)
    """
)


@pytest.fixture
def fake_ssh(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    ssh = bindir / "ssh"
    ssh.write_text(FAKE_SSH.format(python=sys.executable))
    ssh.chmod(0o755)
    log = tmp_path / "ssh.log"
    monkeypatch.setenv("FAKE_SSH_LOG", str(log))
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the control directory lands here

    def calls() -> list[list[str]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return calls


def _fabric(tmp_path, monkeypatch, ssh_args: str | None, hostvars: dict[str, str]) -> Fabric:
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("[defaults]\n" + (f"[ssh_connection]\nssh_args = {ssh_args}\n" if ssh_args else ""))
    monkeypatch.setenv("ANSIBLE_CONFIG", str(cfg))
    inv = tmp_path / "hosts.yml"
    hosts = {name: {"ansible_host": "192.0.2.1", "ansible_user": "root",
                    **({"ansible_ssh_common_args": extra} if extra else {})}
             for name, extra in hostvars.items()}
    inv.write_text(json.dumps({"gpu_hosts": {"hosts": hosts}}))
    return Fabric(str(inv), "gpu_hosts")


def _control_paths(calls, host_ip="192.0.2.1") -> list[str | None]:
    out = []
    for argv in calls:
        if "-O" in argv:
            continue
        words = " ".join(argv).split()
        out.append(next((w.split("=", 1)[1] for w in words if w.startswith("ControlPath=")), None))
    return out


@pytest.mark.parametrize("ssh_args", [None, "-C -o ControlMaster=auto -o ControlPersist=60s"],
                         ids=["testinfra-default", "ansible-cfg-ssh-args"])
def test_every_command_to_a_host_goes_through_one_master_that_close_ends(tmp_path, monkeypatch, fake_ssh,
                                                                        ssh_args):
    fab = _fabric(tmp_path, monkeypatch, ssh_args, {"gpu01": "", "gpu02": ""})
    assert fab.run("gpu01", "echo one")["stdout"] == "one\n"
    assert fab.run("gpu01", "echo two")["stdout"] == "two\n"
    assert fab.batch("gpu02", {"a": "echo a"}, 5)["a"]["stdout"] == "a\n"
    paths = _control_paths(fake_ssh())
    assert len(paths) == 3 and None not in paths
    assert paths[0] == paths[1] != paths[2], paths
    directory = os.path.dirname(paths[0])
    assert os.path.dirname(paths[2]) == directory and directory.startswith(str(tmp_path))
    mode = os.stat(directory)
    assert stat.S_IMODE(mode.st_mode) == 0o700 and mode.st_uid == os.getuid()
    assert all("ControlMaster=auto" in " ".join(argv) for argv in fake_ssh())

    fab.close()
    exits = [argv for argv in fake_ssh() if "-O" in argv]
    assert sorted(next(a for a in argv if a.startswith("ControlPath=")) for argv in exits) == sorted(
        f"ControlPath={p}" for p in (paths[0], paths[2]))
    assert all(argv[argv.index("-O") + 1] == "exit" for argv in exits)
    assert not os.path.exists(directory)
    fab.close()  # once only
    assert len([argv for argv in fake_ssh() if "-O" in argv]) == 2


def test_the_inventory_s_own_choice_is_left_alone(tmp_path, monkeypatch, fake_ssh):
    own = str(tmp_path / "mine-%C")
    fab = _fabric(tmp_path, monkeypatch, None, {
        "gpu01": "-o ControlMaster=no",
        "gpu02": f"-o ControlMaster=auto -o ControlPersist=30s -o ControlPath={own}",
        "gpu03": "-o ControlMaster=auto",  # no ControlPersist: the first command would hold the master
    })
    for host in ("gpu01", "gpu02", "gpu03"):
        assert fab.run(host, "true")["rc"] == 0
    assert _control_paths(fake_ssh()) == [None, own, None]
    fab.close()
    assert not [argv for argv in fake_ssh() if "-O" in argv]


def test_another_fabric_in_the_same_process_gets_its_own_master(tmp_path, monkeypatch, fake_ssh):
    """testinfra caches one Host per spec for the process; a closed Fabric's socket must not be reused
    (act reads several inventories in one run)."""
    first = _fabric(tmp_path, monkeypatch, None, {"gpu01": ""})
    first.run("gpu01", "true")
    first.close()
    second = Fabric(os.fspath(tmp_path / "hosts.yml"), "gpu_hosts")
    second.run("gpu01", "true")
    one, two = _control_paths(fake_ssh())
    assert one and two and os.path.dirname(one) != os.path.dirname(two)
    assert os.path.exists(two) and not os.path.exists(one)
    cached = Host._host_cache.values()
    assert all(getattr(h.backend, "controlpath", None) in (None, "") for h in cached
               if h.backend.NAME == "ssh"), "the process-wide cached host was changed"
    second.close()


def test_a_socket_path_too_long_for_a_unix_socket_is_not_shared(tmp_path, monkeypatch, fake_ssh):
    """OpenSSH binds the master under the path plus 17 characters, in a 107-byte socket address: a long
    TMPDIR means no sharing (each command connects on its own, as before), never a failed command."""
    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    fab = _fabric(tmp_path, monkeypatch, None, {"gpu01": ""})
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    assert fab.run("gpu01", "echo ok")["stdout"] == "ok\n"
    assert _control_paths(fake_ssh()) == [None]
    fab.close()


def test_the_inventory_read_strictly_once_is_not_read_again(tmp_path, monkeypatch):
    """The CLIs parse the inventory strictly first (cliopts.read_inventory); the transport takes that
    parse instead of running ansible-inventory a second time (0.7 s of CPU a command)."""
    from fabricops import cliopts

    inv = tmp_path / "hosts.yml"
    inv.write_text(json.dumps({"gpu_hosts": {"hosts": {"gpu01": {"ansible_host": "192.0.2.1"}}}}))
    parsed = cliopts.read_inventory(str(inv))
    assert parsed["_meta"]["hostvars"]["gpu01"]["ansible_host"] == "192.0.2.1"
    parsed["gpu_hosts"]["hosts"].append("gpu02")  # what the file does not say: only the parse knows it
    parsed["_meta"]["hostvars"]["gpu02"] = {"ansible_host": "192.0.2.2"}
    fab = Fabric(str(inv), "gpu_hosts", parsed=parsed)
    assert fab.hosts == ["gpu01", "gpu02"] and fab.hostvars("gpu02")["ansible_host"] == "192.0.2.2"
