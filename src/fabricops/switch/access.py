"""One way to reach a switch: its host variables in, netmiko connection parameters out.

The roce_switch action, ``fabricops verify`` (read-only port check) and ``fabricops diagnose``
(switch state) all call :func:`switch_connection` (verify and diagnose with ``inventory=True``),
so they resolve the same variables the same way and fail with the same sentence.

Where the values come from
--------------------------
* The action plugin passes the task's variables as Ansible gives them (Vault and inline-vault values
  are Ansible's own encrypted strings, ``!unsafe`` values are untrusted) and its own templar.
* verify and diagnose pass the host's variables as ``ansible-inventory --list`` prints them: an
  inline-vault value is ``{"__ansible_vault": CIPHERTEXT}`` (decrypted here with Ansible's ``VaultLib``
  and the vault secrets Ansible's configuration names: ``vault_password_file`` /
  ``ANSIBLE_VAULT_PASSWORD_FILE``, ``vault_identity_list``), an ``!unsafe`` value is
  ``{"__ansible_unsafe": TEXT}``; every other string is a template the inventory holds (a
  ``lookup('file', ...)``) and is rendered with Ansible's ``Templar``.
* A decrypted or ``!unsafe`` value is never templated (as in a play); a secret is never part of an
  error, a ``repr`` or a log line.

Variables (the first one set wins)
----------------------------------
====================  ===========================================================================
OS                    ``fabricops_switch_os``, ``ansible_network_os`` (onyx / cumulus spellings)
address               ``ansible_host`` (else the inventory name), ``ansible_port`` (else 22)
user                  ``ansible_user``, ``ansible_ssh_user`` (else ``User`` from the ssh_config)
password (optional)   ``roce_switch_password``, ``ansible_password``, ``ansible_ssh_pass``,
                      $FABRICOPS_SWITCH_PASSWORD
private key           ``roce_switch_private_key_file``, ``ansible_ssh_private_key_file``,
                      ``ansible_private_key_file``, ``-i`` in the ssh args, ``IdentityFile`` of the
                      ssh_config; passphrase: ``roce_switch_private_key_passphrase``,
                      $FABRICOPS_SWITCH_KEY_PASSPHRASE
ssh-agent             ``roce_switch_use_agent`` (default: yes when $SSH_AUTH_SOCK is set)
ssh_config            ``roce_switch_ssh_config``, ``-F`` in the ssh args (HostName, Port, User,
                      IdentityFile, ProxyCommand, ProxyJump of the matching ``Host``)
bastion               ``roce_switch_proxy_jump`` / ``roce_switch_proxy_command``, ``-J`` /
                      ``-o ProxyJump=`` / ``-o ProxyCommand=`` in ``ansible_ssh_common_args`` or
                      ``ansible_ssh_extra_args``, then the ssh_config
known_hosts           ``roce_switch_known_hosts``, ``fabricops_known_hosts``,
                      ``fabricops_ssh_known_hosts``, ``-o UserKnownHostsFile=`` in the ssh args,
                      ``~/.ssh/known_hosts``; it must exist: an unknown host key is refused
====================  ===========================================================================
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import SwitchError
from .oses import REST_API_OS, normalize_os

__all__ = [
    "PASSPHRASE_ENV",
    "PASSWORD_ENV",
    "SwitchAccess",
    "SwitchAccessError",
    "from_inventory_json",
    "known_hosts_from_ssh_args",
    "ssh_options",
    "switch_connection",
    "switch_os",
]

PASSWORD_ENV = "FABRICOPS_SWITCH_PASSWORD"
PASSPHRASE_ENV = "FABRICOPS_SWITCH_KEY_PASSPHRASE"
PASSWORD_VARS = ("roce_switch_password", "ansible_password", "ansible_ssh_pass")
KEY_VARS = ("roce_switch_private_key_file", "ansible_ssh_private_key_file", "ansible_private_key_file")
PASSPHRASE_VARS = ("roce_switch_private_key_passphrase",)
KNOWN_HOSTS_VARS = ("roce_switch_known_hosts", "fabricops_known_hosts", "fabricops_ssh_known_hosts")
SSH_ARGS_VARS = ("ansible_ssh_common_args", "ansible_ssh_extra_args")
OS_VARS = ("fabricops_switch_os", "ansible_network_os")

Render = Callable[[Any], Any]


class SwitchAccessError(SwitchError):
    """The switch cannot be reached with what the inventory holds; one sentence, never a secret."""


def _fail(switch: str, what: str) -> SwitchAccessError:
    return SwitchAccessError(f"{switch}: step 'connect' failed: {what}")


@dataclass(frozen=True, repr=False)
class SwitchAccess:
    """Everything transport.connect needs; ``repr`` / :meth:`describe` show no secret."""

    switch: str
    os_name: str
    host: str
    port: int
    username: str
    known_hosts: str
    password: str | None = None
    key_file: str | None = None
    pkey: Any = None  #: the loaded (decrypted) private key of ``key_file``
    use_agent: bool = False
    proxy_command: str | None = None
    timeout: float = 30
    passphrase: str | None = None  #: of ``key_file`` (already used to load ``pkey``)
    sources: Mapping[str, str] = field(default_factory=dict)  #: credential -> the variable it came from
    transport: str = "cli"  #: ``roce_switch_transport``: cli (netmiko over SSH) or rest (NVUE REST API)
    api_port: int = 8765  #: ``roce_switch_api_port`` (the NVUE API's HTTPS port)
    api_ca: str | None = None  #: ``roce_switch_api_ca``: PEM file the API certificate must verify against

    def methods(self) -> list[str]:
        out = []
        if self.key_file:
            out.append(f"key {self.key_file}")
        if self.use_agent:
            out.append("ssh-agent")
        if self.password is not None:
            out.append(f"password ({self.sources.get('password', 'set')})")
        return out

    def describe(self) -> str:
        via = f" via proxy '{self.proxy_command}'" if self.proxy_command else ""
        return (
            f"{self.username}@{self.host}:{self.port}{via} by {', '.join(self.methods())}; "
            f"known_hosts {self.known_hosts}"
        )

    def __repr__(self) -> str:
        return f"SwitchAccess({self.switch}: {self.describe()})"

    def secrets(self) -> list[str]:
        """The secret strings (for scrubbing any text that might echo one)."""
        return [s for s in (self.password, self.passphrase) if s]

    def scrub(self, text: str) -> str:
        for s in self.secrets():
            text = text.replace(s, "********")
        return text

    def netmiko_params(self) -> dict[str, Any]:
        """ConnectHandler keyword arguments (no ``sock``: transport opens the proxy)."""
        from .transport import NETMIKO_DEVICE_TYPES

        return {
            "device_type": NETMIKO_DEVICE_TYPES[self.os_name],
            "host": self.host,
            "port": int(self.port),
            "username": self.username,
            # netmiko / paramiko: an empty password with keys means "no password authentication"
            "password": self.password or "",
            "pkey": self.pkey,
            "use_keys": False,  # paramiko tries pkey when given; no search of ~/.ssh
            "key_file": None,
            "allow_agent": bool(self.use_agent),
            "ssh_strict": True,  # RejectPolicy: an unknown host key is refused, never added
            "system_host_keys": False,
            "alt_host_keys": True,
            "alt_key_file": self.known_hosts,
            "ssh_config_file": None,  # resolved here (netmiko's own reading knows one hop only)
            "conn_timeout": self.timeout,
            "auth_timeout": self.timeout,
            "banner_timeout": self.timeout,
            "session_log": None,
            "fast_cli": False,
        }


# --------------------------------------------------------------------------- ssh arguments


def ssh_options(args: str | None) -> dict[str, str]:
    """OpenSSH options in an ``ansible_ssh_common_args``-style string, keys lower-case.

    ``-o Key=Value`` / ``-oKey=Value`` / ``-o Key Value``, ``-J hops`` (ProxyJump), ``-F file``
    (configfile), ``-i file`` (identityfile), ``-p port`` (port)."""
    out: dict[str, str] = {}
    if not args:
        return out
    try:
        toks = shlex.split(str(args))
    except ValueError:
        return out
    flags = {"-J": "proxyjump", "-F": "configfile", "-i": "identityfile", "-p": "port"}
    i = 0
    while i < len(toks):
        tok = toks[i]
        opt = None
        if tok == "-o" and i + 1 < len(toks):
            opt, i = toks[i + 1], i + 2
        elif tok.startswith("-o") and len(tok) > 2:
            opt, i = tok[2:], i + 1
        elif tok in flags and i + 1 < len(toks):
            out.setdefault(flags[tok], toks[i + 1])
            i += 2
            continue
        elif tok[:2] in flags and len(tok) > 2:
            out.setdefault(flags[tok[:2]], tok[2:])
            i += 1
            continue
        else:
            i += 1
            continue
        m = re.fullmatch(r"\s*([A-Za-z]+)\s*(?:=|\s)\s*(.+?)\s*", opt)
        if m:
            out.setdefault(m.group(1).lower(), m.group(2))
    return out


def known_hosts_from_ssh_args(args: str | None) -> str | None:
    """The UserKnownHostsFile path from ``ansible_ssh_common_args`` (``-o UserKnownHostsFile=X``)."""
    value = ssh_options(args).get("userknownhostsfile")
    return value.split()[0] if value else None


def _expand_tokens(command: str, host: str, port: int, user: str) -> str:
    table = {"%h": host, "%p": str(port), "%r": user, "%%": "%"}
    return re.sub(r"%[hpr%]", lambda m: table[m.group(0)], command)


def _jump_command(hops: str, host: str, port: int, known_hosts: str, config: str | None) -> str:
    """ProxyJump as OpenSSH runs it: ``ssh -W host:port`` on the last hop, the others with ``-J``."""
    parts = [h.strip() for h in hops.split(",") if h.strip()]
    last = parts[-1]
    m = re.fullmatch(r"(?:ssh://)?(?:(?P<user>[^@]+)@)?(?P<host>\[[^\]]+\]|[^:]+)(?::(?P<port>\d+))?", last)
    if not m:
        raise ValueError(last)
    cmd = ["ssh"]
    if config:
        cmd += ["-F", config]
    # the bastion is checked as strictly as the switch, against the user's known_hosts (ssh_config) and
    # the switches' known_hosts (as the global file); nothing prompts (there is no terminal)
    cmd += ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"]
    cmd += ["-o", f"GlobalKnownHostsFile={known_hosts}"]
    if len(parts) > 1:
        cmd += ["-J", ",".join(parts[:-1])]
    if m.group("port"):
        cmd += ["-p", m.group("port")]
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    cmd += ["-W", target]
    cmd.append(f"{m.group('user')}@{m.group('host')}" if m.group("user") else m.group("host"))
    return shlex.join(cmd)


# --------------------------------------------------------------------------- values


class _Undecryptable:
    """An inline-vault value no configured vault secret opens (fails only where it is used)."""

    def __init__(self, reason: str):
        self.reason = reason

    def __str__(self) -> str:
        raise ValueError(self.reason)


def vault_secrets() -> list:
    """The vault secrets Ansible's configuration names (password files, vault ids), no prompt."""
    from ansible import constants as C
    from ansible.cli import CLI
    from ansible.parsing.dataloader import DataLoader

    ids = list(C.config.get_config_value("DEFAULT_VAULT_IDENTITY_LIST") or [])
    pw_file = C.config.get_config_value("DEFAULT_VAULT_PASSWORD_FILE")
    files = [str(pw_file)] if pw_file else []
    ids = [i for i in ids if not i.endswith("@prompt") and i != "prompt"]
    if not ids and not files:
        return []
    return CLI.setup_vault_secrets(
        DataLoader(),
        vault_ids=ids,
        vault_password_files=files,
        ask_vault_pass=False,
        auto_prompt=False,
        initialize_context=False,
    )


def _decrypt(ciphertext: str, secrets: list | None) -> Any:
    from ansible.parsing.vault import VaultLib

    if secrets is None:
        try:
            secrets = vault_secrets()
        except Exception as exc:
            return _Undecryptable(f"the vault password could not be read ({type(exc).__name__})")
    if not secrets:
        return _Undecryptable(
            "it is vault-encrypted and no vault password is configured (set ANSIBLE_VAULT_PASSWORD_FILE "
            "or vault_password_file in ansible.cfg)"
        )
    try:
        return VaultLib(secrets).decrypt(ciphertext.encode()).decode("utf-8")
    except Exception:
        return _Undecryptable("it is vault-encrypted and the configured vault password does not open it")


def from_inventory_json(hostvars: Mapping[str, Any], secrets: list | None = None) -> dict[str, Any]:
    """Host variables from ``ansible-inventory --list`` made Ansible values again.

    ``{"__ansible_vault": C}`` -> the decrypted text (plain, so never templated), ``{"__ansible_unsafe":
    T}`` -> ``T`` (plain: never templated), any other string -> trusted as a template (it is what the
    inventory file holds)."""
    try:
        from ansible.template import trust_as_template  # ansible-core >= 2.19
    except ImportError:  # pragma: no cover - older ansible-core templates plain strings
        trust_as_template = None
    cache: dict[str, list | None] = {}

    def conv(v: Any) -> Any:
        if isinstance(v, Mapping):
            if set(v) == {"__ansible_vault"}:
                if "s" not in cache:
                    try:
                        cache["s"] = vault_secrets()
                    except Exception:
                        cache["s"] = None
                return _decrypt(str(v["__ansible_vault"]), secrets if secrets is not None else cache["s"])
            if set(v) == {"__ansible_unsafe"}:
                return str(v["__ansible_unsafe"])
            return {k: conv(x) for k, x in v.items()}
        if isinstance(v, list):
            return [conv(x) for x in v]
        if isinstance(v, str) and trust_as_template is not None and ("{{" in v or "{%" in v):
            return trust_as_template(v)
        return v

    return {k: conv(v) for k, v in hostvars.items()}


_PLUGINS_READY = False


def ansible_render(variables: Mapping[str, Any]) -> Render:
    """A renderer with Ansible's Templar over ``variables`` (what a play would see)."""
    global _PLUGINS_READY
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    if not _PLUGINS_READY:
        from ansible.plugins.loader import init_plugin_loader
        from ansible.utils.collection_loader import AnsibleCollectionConfig

        # inside ansible-playbook (an action plugin) the finder is already there; a second
        # init would reconfigure it
        if AnsibleCollectionConfig.collection_finder is None:
            init_plugin_loader()
        _PLUGINS_READY = True
    templar = Templar(loader=DataLoader(), variables=dict(variables))
    return templar.template


def _is_vault_object(v: Any) -> bool:
    return type(v).__name__ in ("EncryptedString", "AnsibleVaultEncryptedUnicode")


class _Vars:
    def __init__(self, switch: str, hostvars: Mapping[str, Any], render: Render):
        self.switch, self.hv, self.render = switch, hostvars, render

    def value(self, name: str, secret: bool = False) -> Any:
        raw = self.hv.get(name)
        if raw is None:
            return None
        try:
            if isinstance(raw, _Undecryptable):
                str(raw)
            if _is_vault_object(raw):
                return str(raw)  # decrypted by Ansible; its text is never templated
            if isinstance(raw, str) and ("{{" in raw or "{%" in raw):
                out = self.render(raw)
                if isinstance(out, _Undecryptable):
                    str(out)
                return str(out) if _is_vault_object(out) else out
            return raw
        except Exception as exc:
            reason = getattr(exc, "reason", None) or (str(exc) if isinstance(exc, ValueError) else "")
            if secret:
                # the message of a failed template may quote the template, and so a secret: not shown
                if reason and "vault" in reason:
                    raise _fail(self.switch, f"{name}: {reason}.") from None
                raise _fail(
                    self.switch,
                    f"{name} could not be resolved ({type(exc).__name__}); if the secret itself contains "
                    "'{{', mark it !unsafe or keep it in Ansible Vault.",
                ) from None
            first = (reason or str(exc)).splitlines()[0][:200] if (reason or str(exc)) else ""
            what = f"{name} could not be resolved ({type(exc).__name__}: {first})."
            raise _fail(self.switch, what) from None

    def first(self, names: tuple[str, ...], secret: bool = False) -> tuple[str | None, Any]:
        for name in names:
            v = self.value(name, secret)
            if v not in (None, "") and not (isinstance(v, list | tuple) and not v):
                return name, v
        return None, None


def _truthy(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    return str(v).strip().lower() in ("1", "true", "yes", "on", "y")


def _ssh_config_lookup(path: str, host: str) -> dict[str, Any]:
    import paramiko

    cfg = paramiko.SSHConfig.from_path(path)
    return dict(cfg.lookup(host))


def switch_connection(
    hostvars: Mapping[str, Any],
    *,
    switch: str | None = None,
    os_name: str | None = None,
    known_hosts: str | None = None,
    timeout: float = 30,
    render: Render | None = None,
    env: Mapping[str, str] | None = None,
    inventory: bool = False,
) -> SwitchAccess:
    """How to reach one switch, from its resolved host variables (see the module doc).

    ``inventory=True``: ``hostvars`` as ``ansible-inventory --list`` prints them (verify, diagnose):
    inline vault decrypted, ``!unsafe`` kept literal (:func:`from_inventory_json`). Without it, the
    variables as a play holds them (the action plugin, with its own templar as ``render``).

    Raises :class:`SwitchAccessError`: one sentence naming the switch and the variable to fix."""
    env = os.environ if env is None else env
    if inventory:
        hostvars = from_inventory_json(hostvars)
    switch = str(switch or hostvars.get("inventory_hostname") or "switch")
    v = _Vars(switch, hostvars, render or ansible_render(hostvars))

    if os_name is None:
        _n, os_value = v.first(OS_VARS)
        try:
            os_name = normalize_os(os_value)
        except SwitchError as exc:
            raise _fail(switch, str(exc)) from None
    else:
        os_name = normalize_os(os_name)

    ssh_args: dict[str, str] = {}
    for name in SSH_ARGS_VARS:
        value = v.value(name)
        if value:
            for k, x in ssh_options(str(value)).items():
                ssh_args.setdefault(k, x)

    host = str(v.value("ansible_host") or switch)
    _n, cfg_path = v.first(("roce_switch_ssh_config",))
    cfg_path = cfg_path or ssh_args.get("configfile")
    cfg: dict[str, Any] = {}
    if cfg_path:
        cfg_path = os.path.abspath(os.path.expanduser(str(cfg_path)))
        if not os.path.isfile(cfg_path):
            raise _fail(switch, f"the ssh_config {cfg_path} (roce_switch_ssh_config) does not exist.")
        try:
            cfg = _ssh_config_lookup(cfg_path, host)
        except Exception as exc:
            what = f"the ssh_config {cfg_path} could not be read ({type(exc).__name__})."
            raise _fail(switch, what) from None

    target = str(cfg.get("hostname") or host)
    _pn, port_value = v.first(("ansible_port",))
    port_value = port_value or ssh_args.get("port") or cfg.get("port") or 22
    try:
        port = int(port_value)
        if not 0 < port < 65536:
            raise ValueError
    except (TypeError, ValueError):
        raise _fail(switch, f"ansible_port {port_value!r} is not a TCP port.") from None

    _n, user = v.first(("ansible_user", "ansible_ssh_user"))
    user = user or cfg.get("user")
    if not user:
        raise _fail(switch, "no user; set ansible_user.")

    _kn, kh = v.first(KNOWN_HOSTS_VARS)
    kh = known_hosts or kh or known_hosts_from_ssh_args(v.value("ansible_ssh_common_args"))
    kh = os.path.abspath(os.path.expanduser(str(kh or "~/.ssh/known_hosts")))
    if not os.path.isfile(kh):
        raise _fail(
            switch,
            f"no known_hosts file ({kh}); fabricops checks switch host keys: set roce_switch_known_hosts, "
            "fabricops_known_hosts or -o UserKnownHostsFile= in ansible_ssh_common_args.",
        )

    sources: dict[str, str] = {}
    pw_name, password = v.first(PASSWORD_VARS, secret=True)
    if password in (None, "") and env.get(PASSWORD_ENV):
        pw_name, password = f"${PASSWORD_ENV}", env.get(PASSWORD_ENV)
    if password not in (None, ""):
        password = str(password)
        sources["password"] = str(pw_name)
    else:
        password = None

    key_name, key_file = v.first(KEY_VARS)
    if not key_file and ssh_args.get("identityfile"):
        key_name, key_file = "-i in ansible_ssh_common_args", ssh_args["identityfile"]
    if not key_file and cfg.get("identityfile"):
        files = [f for f in cfg["identityfile"] if os.path.isfile(os.path.expanduser(f))]
        if files:
            key_name, key_file = f"IdentityFile in {cfg_path}", files[0]
    pkey = passphrase = None
    if key_file:
        key_file = os.path.abspath(os.path.expanduser(str(key_file)))
        _pn, passphrase = v.first(PASSPHRASE_VARS, secret=True)
        passphrase = passphrase or env.get(PASSPHRASE_ENV) or None
        pkey = _load_key(switch, str(key_name), key_file, passphrase)
        sources["key"] = str(key_name)

    _n, agent = v.first(("roce_switch_use_agent",))
    use_agent = _truthy(agent) if agent not in (None, "") else bool(env.get("SSH_AUTH_SOCK"))
    if use_agent and not env.get("SSH_AUTH_SOCK"):
        if _n:
            raise _fail(switch, "roce_switch_use_agent is true but no ssh-agent runs ($SSH_AUTH_SOCK unset).")
        use_agent = False

    if password is None and pkey is None and not use_agent:
        raise _fail(
            switch,
            "no credentials; set ansible_user and ansible_password (from Ansible Vault) or "
            f"roce_switch_private_key_file, run an ssh-agent, or export {PASSWORD_ENV}.",
        )

    proxy = None
    _n, pcmd = v.first(("roce_switch_proxy_command",))
    _n2, pjump = v.first(("roce_switch_proxy_jump",))
    if not pcmd and not pjump:
        pcmd, pjump = ssh_args.get("proxycommand"), ssh_args.get("proxyjump")
    if not pcmd and not pjump:
        pcmd, pjump = cfg.get("proxycommand"), cfg.get("proxyjump")
    if pcmd and str(pcmd).lower() != "none":
        proxy = _expand_tokens(str(pcmd), target, port, str(user))
    elif pjump and str(pjump).lower() != "none":
        try:
            proxy = _jump_command(str(pjump), target, port, kh, cfg_path)
        except ValueError:
            raise _fail(switch, f"ProxyJump {pjump!r} is not [user@]host[:port][,...].") from None

    rest = _rest_access(switch, v, os_name, password, proxy)
    return SwitchAccess(
        **rest,
        switch=switch,
        os_name=os_name,
        host=target,
        port=port,
        username=str(user),
        known_hosts=kh,
        password=password,
        key_file=key_file or None,
        pkey=pkey,
        use_agent=use_agent,
        proxy_command=proxy,
        timeout=float(timeout),
        passphrase=str(passphrase) if key_file and passphrase else None,
        sources=sources,
    )


def switch_os(hostvars: Mapping[str, Any]) -> str | None:
    """The switch OS the variables name (``fabricops_switch_os``, else ``ansible_network_os``, any
    spelling of ``fabricops.switch.oses.OS_NAMES``); None when neither names one fabricops drives
    (an InfiniBand switch, a host). The same resolution as :func:`switch_connection`."""
    for name in OS_VARS:
        value = hostvars.get(name)
        if value not in (None, ""):
            try:
                return normalize_os(value if isinstance(value, str) else str(value))
            except SwitchError:
                return None
    return None


def _rest_access(switch: str, v: _Vars, os_name: str, password: str | None, proxy: str | None) -> dict:
    """``roce_switch_transport`` (cli | rest) and, for rest, the NVUE API's port and certificate."""
    _n, transport = v.first(("roce_switch_transport",))
    transport = str(transport or "cli").strip().lower()
    if transport not in {"cli", "rest"}:
        raise _fail(switch, f"roce_switch_transport {transport!r} is not cli or rest.")
    if transport == "cli":
        return {}
    if os_name not in REST_API_OS:
        raise _fail(switch, "roce_switch_transport rest is for Cumulus NVUE switches only; use cli.")
    if password is None:
        raise _fail(switch, "roce_switch_transport rest logs in with a password (HTTP basic auth); set one.")
    if proxy:
        raise _fail(switch, "roce_switch_transport rest does not go through an SSH proxy; use cli.")
    _n, port_value = v.first(("roce_switch_api_port",))
    try:
        api_port = int(port_value or 8765)
        if not 0 < api_port < 65536:
            raise ValueError
    except (TypeError, ValueError):
        raise _fail(switch, f"roce_switch_api_port {port_value!r} is not a TCP port.") from None
    _n, ca = v.first(("roce_switch_api_ca",))
    ca = os.path.abspath(os.path.expanduser(str(ca))) if ca else None
    if not ca or not os.path.isfile(ca):
        raise _fail(
            switch,
            f"roce_switch_transport rest needs roce_switch_api_ca, the PEM certificate the switch's API "
            f"must verify against ({ca or 'not set'}); fabricops never skips TLS verification.",
        )
    return {"transport": "rest", "api_port": api_port, "api_ca": ca}


def _load_key(switch: str, var: str, path: str, passphrase: str | None) -> Any:
    import paramiko

    if not os.path.isfile(path):
        raise _fail(switch, f"the private key file {path} ({var}) does not exist.")
    try:
        # cryptography wants the passphrase as bytes (a TypeError without one: the key is encrypted)
        return paramiko.PKey.from_path(path, password=passphrase.encode() if passphrase else None)
    except (paramiko.PasswordRequiredException, TypeError):
        if passphrase:
            what = f"the private key {path} ({var}) did not open with the passphrase given."
            raise _fail(switch, what) from None
        raise _fail(
            switch,
            f"the private key {path} ({var}) is encrypted; set roce_switch_private_key_passphrase "
            f"(from Ansible Vault) or export {PASSPHRASE_ENV}, or load the key into an ssh-agent.",
        ) from None
    except PermissionError:
        raise _fail(switch, f"the private key file {path} ({var}) is not readable.") from None
    except Exception as exc:
        if passphrase:
            raise _fail(
                switch,
                f"the private key {path} ({var}) did not open with the passphrase given "
                f"({type(exc).__name__}).",
            ) from None
        what = f"{path} ({var}) is not a private key paramiko reads ({type(exc).__name__})."
        raise _fail(switch, what) from None
