"""Switch access through fabricops.switch.access + transport.connect, against the emulated switches
on 127.0.0.1: password, key file, ssh-agent, ProxyJump / ProxyCommand through a bastion, host keys
refused, wrong keys refused; and the secrets of every inventory path (Vault file, inline vault,
!unsafe, env, key passphrase) reach the switch and nothing else (stdout, stderr, logs, errors)."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path
from typing import ClassVar

import asyncssh
import pytest

from fabricops.switch import transport
from fabricops.switch.access import SwitchAccessError, from_inventory_json, switch_connection
from fabricops.switch.errors import SwitchError
from fabricops_lab.switchd.server import close, serve

PASSWORD = "s3cret-Pw{{x}}"
USERS = {"onyx": "admin", "cumulus": "cumulus"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Loop:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(15)


@pytest.fixture(scope="module")
def loop():
    return Loop()


def _keypair(path: Path, passphrase: str | None = None) -> str:
    k = asyncssh.generate_private_key("ssh-ed25519")
    path.write_bytes(k.export_private_key("openssh", passphrase=passphrase))
    path.chmod(0o600)
    return k.export_public_key().decode().strip()


class Switch:
    def __init__(self, loop, tmp: Path, os_name: str, password: str | None, authorized: list[str]):
        self.os_name, self.port = os_name, _free_port()
        tmp.mkdir(parents=True, exist_ok=True)
        ak = None
        if authorized:
            ak = tmp / "authorized_keys"
            ak.write_text("\n".join(authorized) + "\n")
        self.host_key = tmp / "hostkey"
        ports = ["Eth1/1"] if os_name == "onyx" else ["swp1"]
        self.acceptor = loop.run(
            serve(
                os_name,
                "sw1",
                ports,
                "127.0.0.1",
                self.port,
                str(self.host_key),
                password,
                str(tmp / "state"),
                None,
                authorized_keys=str(ak) if ak else None,
            )
        )
        pub = asyncssh.read_private_key(str(self.host_key)).export_public_key().decode().split()
        self.known_line = f"[127.0.0.1]:{self.port} {pub[0]} {pub[1]}"
        self.loop = loop

    def close(self):
        self.loop.run(close(self.acceptor))


@pytest.fixture
def env(tmp_path, loop, monkeypatch):
    """Two switches (Onyx password-only, Cumulus key-only), a client key and a known_hosts."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv("FABRICOPS_SWITCH_PASSWORD", raising=False)
    key = tmp_path / "id_ed25519"
    pub = _keypair(key)
    onyx = Switch(loop, tmp_path / "onyx", "onyx", PASSWORD, [])
    cumulus = Switch(loop, tmp_path / "cumulus", "cumulus", None, [pub])
    kh = tmp_path / "known_hosts"
    kh.write_text(onyx.known_line + "\n" + cumulus.known_line + "\n")
    yield {"key": key, "pub": pub, "onyx": onyx, "cumulus": cumulus, "kh": kh, "tmp": tmp_path}
    onyx.close()
    cumulus.close()


def hostvars(sw: Switch, kh: Path, **extra):
    hv = {
        "inventory_hostname": f"leaf-{sw.os_name}",
        "ansible_host": "127.0.0.1",
        "ansible_port": sw.port,
        "ansible_user": USERS[sw.os_name],
        "fabricops_switch_os": sw.os_name,
        "roce_switch_known_hosts": str(kh),
    }
    hv.update(extra)
    return hv


def prompt_of(access) -> str:
    conn = transport.connect(access)
    try:
        return conn.find_prompt()
    finally:
        conn.disconnect()


def one_sentence(exc) -> str:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text
    return text


# --------------------------------------------------------------------------- logins


def test_password_login(env):
    access = switch_connection(hostvars(env["onyx"], env["kh"], ansible_password=PASSWORD))
    assert access.password == PASSWORD and access.pkey is None and not access.use_agent
    assert PASSWORD not in repr(access) and PASSWORD not in access.describe()
    assert prompt_of(access).strip()


def test_key_file_login_to_a_key_only_switch(env, caplog):
    caplog.set_level(logging.INFO, logger="fabricops_lab.switchd")
    hv = hostvars(env["cumulus"], env["kh"], roce_switch_private_key_file=str(env["key"]))
    access = switch_connection(hv)
    assert access.password is None
    assert "cumulus@" in prompt_of(access)
    assert "Accepted publickey for cumulus" in caplog.text


def test_key_file_defaults_to_ansible_ssh_private_key_file(env):
    hv = hostvars(env["cumulus"], env["kh"], ansible_ssh_private_key_file=str(env["key"]))
    access = switch_connection(hv)
    assert access.key_file == str(env["key"]) and prompt_of(access)


def test_wrong_key_is_refused_in_one_sentence(env, tmp_path):
    other = tmp_path / "other_key"
    _keypair(other)
    access = switch_connection(hostvars(env["cumulus"], env["kh"], roce_switch_private_key_file=str(other)))
    with pytest.raises(SwitchError) as err:
        transport.connect(access)
    text = one_sentence(err.value)
    assert text.startswith("leaf-cumulus: step 'connect' failed:") and "refused the login of cumulus" in text


def test_password_to_a_key_only_switch_is_refused(env):
    access = switch_connection(hostvars(env["cumulus"], env["kh"], ansible_password=PASSWORD))
    with pytest.raises(SwitchError) as err:
        transport.connect(access)
    assert "refused the login" in one_sentence(err.value) and PASSWORD not in str(err.value)


def test_unknown_host_key_is_refused(env, tmp_path):
    kh = tmp_path / "other_known_hosts"
    kh.write_text(env["cumulus"].known_line + "\n")  # knows the other switch only
    access = switch_connection(hostvars(env["onyx"], kh, ansible_password=PASSWORD))
    with pytest.raises(SwitchError) as err:
        transport.connect(access)
    text = one_sentence(err.value)
    assert "is not in" in text and "never accepts an unknown switch key" in text and PASSWORD not in text
    assert kh.read_text() == env["cumulus"].known_line + "\n"  # nothing added


def test_changed_host_key_is_refused(env, tmp_path):
    kh = tmp_path / "kh"
    kh.write_text(f"[127.0.0.1]:{env['onyx'].port} {env['pub'].split()[0]} {env['pub'].split()[1]}\n")
    access = switch_connection(hostvars(env["onyx"], kh, ansible_password=PASSWORD))
    with pytest.raises(SwitchError) as err:
        transport.connect(access)
    assert "does not match" in one_sentence(err.value)


def test_missing_known_hosts_fails_before_connecting(env, tmp_path):
    with pytest.raises(SwitchAccessError) as err:
        switch_connection(hostvars(env["onyx"], tmp_path / "nope", ansible_password=PASSWORD))
    assert "no known_hosts file" in one_sentence(err.value)


def test_no_credentials_names_the_variables(env):
    with pytest.raises(SwitchAccessError) as err:
        switch_connection(hostvars(env["onyx"], env["kh"]))
    text = one_sentence(err.value)
    assert text.startswith("leaf-onyx: step 'connect' failed: no credentials")
    assert "ansible_password" in text and "roce_switch_private_key_file" in text


@pytest.fixture
def agent(tmp_path, env, monkeypatch):
    if not shutil.which("ssh-agent"):
        pytest.skip("ssh-agent is not installed")
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(
        ["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            if sock.exists():
                break
            subprocess.run(["sleep", "0.05"])
        add = subprocess.run(
            ["ssh-add", str(env["key"])],
            env={**os.environ, "SSH_AUTH_SOCK": str(sock)},
            capture_output=True,
            text=True,
        )
        assert add.returncode == 0, add.stderr
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        yield sock
    finally:
        proc.terminate()
        proc.wait(5)


def test_ssh_agent_login(env, agent):
    access = switch_connection(hostvars(env["cumulus"], env["kh"]))  # agent on by default with a socket
    assert access.use_agent and access.pkey is None and access.password is None
    assert "cumulus@" in prompt_of(access)


def test_agent_can_be_turned_off(env, agent):
    with pytest.raises(SwitchAccessError, match="no credentials"):
        switch_connection(hostvars(env["cumulus"], env["kh"], roce_switch_use_agent=False))


# --------------------------------------------------------------------------- bastion


class Bastion(asyncssh.SSHServer):
    """An SSH jump host: public-key login for ``jump``, direct TCP forwarding (what ``ssh -W`` asks)."""

    forwarded: ClassVar[list] = []

    def __init__(self, keys):
        self.keys = keys

    def begin_auth(self, username):
        return True

    def public_key_auth_supported(self):
        return True

    def validate_public_key(self, username, key):
        return username == "jump" and key.public_data in self.keys

    def connection_requested(self, dest_host, dest_port, orig_host, orig_port):
        Bastion.forwarded.append((dest_host, dest_port))
        return True


@pytest.fixture
def bastion(env, loop, tmp_path):
    port = _free_port()
    hk = asyncssh.generate_private_key("ssh-ed25519")
    keys = {asyncssh.import_public_key(env["pub"]).public_data}

    async def start():
        return await asyncssh.create_server(lambda: Bastion(keys), "127.0.0.1", port, server_host_keys=[hk])

    acceptor = loop.run(start())
    pub = hk.export_public_key().decode().split()
    with env["kh"].open("a") as f:  # the bastion's key: ssh checks it strictly too
        f.write(f"[127.0.0.1]:{port} {pub[0]} {pub[1]}\n")
    Bastion.forwarded = []
    yield port

    loop.run(close(acceptor))  # on the loop's own thread: asyncssh servers are not thread-safe


def _ssh_config(env, bastion_port, proxy_line):
    cfg = env["tmp"] / "ssh_config"
    cfg.write_text(
        f"Host bastion\n  HostName 127.0.0.1\n  Port {bastion_port}\n  User jump\n"
        f"  IdentityFile {env['key']}\n  IdentitiesOnly yes\n  UserKnownHostsFile {env['kh']}\n"
        f"Host leaf\n  HostName 127.0.0.1\n  Port {env['onyx'].port}\n  {proxy_line}\n"
    )
    return cfg


def test_proxyjump_from_ssh_config(env, bastion):
    cfg = _ssh_config(env, bastion, "ProxyJump bastion")
    hv = hostvars(
        env["onyx"],
        env["kh"],
        ansible_host="leaf",
        ansible_password=PASSWORD,
        roce_switch_ssh_config=str(cfg),
    )
    del hv["ansible_port"]  # from the ssh_config
    access = switch_connection(hv)
    assert access.port == env["onyx"].port and "-W" in access.proxy_command
    assert prompt_of(access).strip()
    assert Bastion.forwarded == [("127.0.0.1", env["onyx"].port)]


def test_proxycommand_in_ansible_ssh_common_args(env, bastion):
    cfg = _ssh_config(env, bastion, "")
    args = f'-o ProxyCommand="ssh -F {cfg} -o BatchMode=yes -W %h:%p bastion" '
    args += f"-o UserKnownHostsFile={env['kh']}"
    hv = hostvars(
        env["cumulus"], env["kh"], ansible_ssh_common_args=args, roce_switch_private_key_file=str(env["key"])
    )
    del hv["roce_switch_known_hosts"]  # from -o UserKnownHostsFile=
    access = switch_connection(hv)
    assert access.known_hosts == str(env["kh"])
    assert "cumulus@" in prompt_of(access)
    assert Bastion.forwarded == [("127.0.0.1", env["cumulus"].port)]


def test_bastion_refusing_fails_in_one_sentence(env, bastion, tmp_path):
    other = tmp_path / "nokey"
    _keypair(other)
    cfg = _ssh_config(env, bastion, "ProxyJump bastion")
    cfg.write_text(cfg.read_text().replace(str(env["key"]), str(other)))
    hv = hostvars(
        env["onyx"],
        env["kh"],
        ansible_host="leaf",
        ansible_password=PASSWORD,
        roce_switch_ssh_config=str(cfg),
    )
    with pytest.raises(SwitchError) as err:
        # the proxy's ssh exits at once, but the session waits for the banner until its timeout:
        # the test sets one of 3 s, not the 30 s default
        transport.connect(switch_connection(hv, timeout=3))
    text = one_sentence(err.value)
    assert "through the proxy" in text and PASSWORD not in text and Bastion.forwarded == []


# --------------------------------------------------------------------------- secrets, every path

VAULT_PW = "vault-pass-42"


@pytest.fixture
def vault(tmp_path, monkeypatch):
    pw = tmp_path / "vault_pass"
    pw.write_text(VAULT_PW + "\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(pw))
    return pw


def _run(*cmd, **kw):
    return subprocess.run(list(cmd), capture_output=True, text=True, check=True, **kw)


def _inventory(env, tmp_path, switch_yaml: str) -> Path:
    inv = tmp_path / "inv"
    (inv / "host_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text(
        "all:\n  children:\n    switches:\n      hosts:\n        leaf-onyx:\n        leaf-cumulus:\n"
    )
    (inv / "host_vars" / "leaf-onyx.yml").write_text(switch_yaml)
    return inv


def _onyx_vars(env) -> str:
    return (
        f"ansible_host: 127.0.0.1\nansible_port: {env['onyx'].port}\nansible_user: admin\n"
        f"ansible_network_os: onyx\nroce_switch_known_hosts: {env['kh']}\n"
    )


def _read_via_verify_and_diagnose(inv: Path, capfd, caplog):
    """verify's SwitchReader and diagnose's switch_states over the inventory; both must read the switch."""
    from fabricops.diagnose import switch_states
    from fabricops.verify.switchstate import SwitchReader
    from fabricops.verify.transport import Fabric

    caplog.set_level(logging.DEBUG, logger="fabricops")
    caplog.set_level(logging.INFO)
    fabric = Fabric(str(inv), "switches")
    problems = SwitchReader(fabric.inventory_vars, {"lossless_priority": 3})("leaf-onyx", ["Eth1/1"])
    assert set(problems) == {"Eth1/1"}
    fabric.hostvars = fabric.inventory_vars
    states, notes = switch_states(
        fabric, [{"host": "gpu01", "switch": "leaf-onyx", "switch_port": "Eth1/1"}], ["gpu01"], 3
    )
    assert notes == [] and "leaf-onyx" in states
    out = capfd.readouterr()
    return out.out + out.err + caplog.text + repr(problems) + repr(states)


def _assert_secret_absent(text: str):
    assert PASSWORD not in text
    for piece in ("s3cret", "Pw{{"):
        assert piece not in text


def test_inline_vault_password_verify_and_diagnose(env, tmp_path, vault, capfd, caplog):
    enc = _run("ansible-vault", "encrypt_string", PASSWORD, "--name", "ansible_password").stdout
    inv = _inventory(env, tmp_path, _onyx_vars(env) + enc)
    from fabricops.verify.transport import Fabric

    hv = Fabric(str(inv), "switches").inventory_vars("leaf-onyx")
    assert set(hv["ansible_password"]) == {"__ansible_vault"}  # what ansible-inventory --list prints
    assert switch_connection(from_inventory_json(hv)).password == PASSWORD
    _assert_secret_absent(_read_via_verify_and_diagnose(inv, capfd, caplog))


def test_vault_encrypted_vars_file_verify_and_diagnose(env, tmp_path, vault, capfd, caplog):
    inv = _inventory(env, tmp_path, _onyx_vars(env) + f"ansible_password: !unsafe '{PASSWORD}'\n")
    _run("ansible-vault", "encrypt", str(inv / "host_vars" / "leaf-onyx.yml"))
    assert "$ANSIBLE_VAULT" in (inv / "host_vars" / "leaf-onyx.yml").read_text()
    _assert_secret_absent(_read_via_verify_and_diagnose(inv, capfd, caplog))


def test_unsafe_password_with_braces_is_not_templated(env, tmp_path, capfd, caplog):
    inv = _inventory(env, tmp_path, _onyx_vars(env) + f"ansible_password: !unsafe '{PASSWORD}'\n")
    _assert_secret_absent(_read_via_verify_and_diagnose(inv, capfd, caplog))


def test_password_from_file_lookup(env, tmp_path, capfd, caplog):
    pw = tmp_path / "pw"
    pw.write_text(PASSWORD + "\n")
    line = f"ansible_password: \"{{{{ lookup('file', '{pw}') }}}}\"\n"
    inv = _inventory(env, tmp_path, _onyx_vars(env) + line)
    _assert_secret_absent(_read_via_verify_and_diagnose(inv, capfd, caplog))


def test_password_from_environment(env, tmp_path, monkeypatch, capfd, caplog):
    monkeypatch.setenv("FABRICOPS_SWITCH_PASSWORD", PASSWORD)
    inv = _inventory(env, tmp_path, _onyx_vars(env))
    _assert_secret_absent(_read_via_verify_and_diagnose(inv, capfd, caplog))


def test_templated_secret_error_does_not_show_it(env):
    """A password with '{{' that is not !unsafe is a template to Ansible; its failure hides the text."""
    from ansible.template import trust_as_template

    hv = hostvars(env["onyx"], env["kh"], ansible_password=trust_as_template(PASSWORD))
    with pytest.raises(SwitchAccessError) as err:
        switch_connection(hv)
    text = one_sentence(err.value)
    assert "ansible_password could not be resolved" in text and "!unsafe" in text
    _assert_secret_absent(text)


def test_wrong_vault_password_is_one_sentence(env, tmp_path, vault):
    enc = _run("ansible-vault", "encrypt_string", PASSWORD, "--name", "ansible_password").stdout
    inv = _inventory(env, tmp_path, _onyx_vars(env) + enc)
    from fabricops.verify.transport import Fabric

    hv = Fabric(str(inv), "switches").inventory_vars("leaf-onyx")
    vault.write_text("not-the-password\n")
    with pytest.raises(SwitchAccessError) as err:
        switch_connection(from_inventory_json(hv))
    assert "vault-encrypted and the configured vault password does not open it" in one_sentence(err.value)


def test_encrypted_key_with_passphrase(env, tmp_path, monkeypatch, capfd, caplog):
    phrase = "key-Phrase-77"
    key = tmp_path / "enc_key"
    pub = _keypair(key, passphrase=phrase)
    (tmp_path / "cumulus" / "authorized_keys").write_text(pub + "\n")
    sw = Switch(asyncio_loop := env["onyx"].loop, tmp_path / "cum2", "cumulus", None, [pub])
    del asyncio_loop
    try:
        kh = tmp_path / "kh2"
        kh.write_text(sw.known_line + "\n")
        with pytest.raises(SwitchAccessError) as err:
            switch_connection(hostvars(sw, kh, roce_switch_private_key_file=str(key)))
        assert "is encrypted; set roce_switch_private_key_passphrase" in one_sentence(err.value)
        with pytest.raises(SwitchAccessError) as err:
            switch_connection(
                hostvars(
                    sw, kh, roce_switch_private_key_file=str(key), roce_switch_private_key_passphrase="wrong"
                )
            )
        assert "did not open with the passphrase" in one_sentence(err.value)
        access = switch_connection(
            hostvars(sw, kh, roce_switch_private_key_file=str(key), roce_switch_private_key_passphrase=phrase)
        )
        assert "cumulus@" in prompt_of(access)
        monkeypatch.setenv("FABRICOPS_SWITCH_KEY_PASSPHRASE", phrase)
        access = switch_connection(hostvars(sw, kh, roce_switch_private_key_file=str(key)))
        assert "cumulus@" in prompt_of(access)
        out = capfd.readouterr()
        text = out.out + out.err + caplog.text + repr(access) + access.describe()
        assert phrase not in text
    finally:
        sw.close()
