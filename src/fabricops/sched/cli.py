"""``fabricops topology``: Slurm topology.conf (tree or block) or Kubernetes node labels from the
fabric's cabling (docs/scheduler-topology.md).

Exit statuses (the table of every command, docs/cli.md): 0 written, unchanged or printed (under
``--check``: the file is what would be generated); 3 under ``--check``: the file differs; 4 the
cabling or the inventory could not be read, or the file not written; 5 invalid input (a name that
cannot go into the file, a cabling entry missing a field, a network with no host).
"""

from __future__ import annotations

import contextlib
import difflib
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from fabricops.errors import EXIT_DRIFT, EXIT_OK, CouldNotRun, FabricopsError, UsageError

FILE_MODE = 0o644  # topology.conf is read by slurmctld and slurmd, as slurm.conf is
NODE_NAME_VAR = "slurm_node_name"
K8S_NAME_VAR = "fabricops_k8s_node_name"
DOMAIN_VAR = "fabricops_nvlink_domain"
FORMATS = ("tree", "block", "k8s-labels")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "topology",
        help="Slurm topology.conf (tree, block) or Kubernetes node labels from the fabric's cabling",
        description="Write the fabric's shape for the scheduler: Slurm topology.conf for topology/tree "
        "from the cabling (leaves list their nodes, spines their leaves), topology/block from the NVLink "
        "domains the inventory declares (fabricops_nvlink_domain), or the same facts as Kubernetes node "
        "labels. Exit statuses: 0 written / unchanged / printed, 3 differs under --check, 4 could not "
        "read the cabling or write the file, 5 invalid input (docs/scheduler-topology.md).",
    )
    p.add_argument("-i", "--inventory", help="Ansible inventory (default: ansible.cfg's)")
    p.add_argument("-l", "--limit", default="gpu_hosts", metavar="PATTERN",
                   help="the hosts to read from and label (default: gpu_hosts)")
    p.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                   help="extra variables as for ansible-playbook -e (they win over the inventory)")
    p.add_argument("--from", dest="source", choices=("as-built", "plan"), default="as-built",
                   help="the cabling as the fabric reports it (ibnetdiscover, LLDP; the default) or as the "
                   "inventory plans it (fabricops_cabling, fabricops_switch_links)")
    p.add_argument("--fabric", default="infiniband", metavar="NETWORK",
                   help="the network the scheduler follows: infiniband (default), roce, or a switch name "
                   "(the fabric that switch is in)")
    p.add_argument("--rail", metavar="HCA",
                   help="place each node under the leaf of this HCA's port (default: its first port on the "
                   "network)")
    p.add_argument("--format", choices=FORMATS, default="tree",
                   help="tree: topology.conf for topology/tree (default); block: topology.conf for "
                   "topology/block from the NVLink domains; k8s-labels: Kubernetes node labels (YAML)")
    p.add_argument("--block-sizes", metavar="N[,N...]",
                   help="BlockSizes= for --format block (default: the smallest domain's node count)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write FILE (only when its content differs; atomically, mode 0644) instead of stdout")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 3 when FILE differs from what would be generated, 0 when not")
    p.add_argument("--timeout", type=float, default=60, metavar="SECONDS",
                   help="per command on a host when reading the cabling as built (default 60)")
    p.add_argument("-q", "--quiet", action="store_true", help="no notes on stderr")
    p.set_defaults(func=cmd_topology)


# --- the inventory seam (tests replace it) ---------------------------------------------------------


def open_inventory(inventory: str | None, limit: str) -> Any:
    """The hosts, their variables and ``run`` (verify's transport,
    :class:`fabricops.verify.transport.Fabric`); the inventory parsed strictly first."""
    from fabricops import cliopts
    from fabricops.verify.transport import Fabric

    parsed = cliopts.read_inventory(inventory)
    try:
        return Fabric(inventory, limit, parsed=parsed)
    except FabricopsError as exc:
        raise CouldNotRun(str(exc)) from None


# --- the command ----------------------------------------------------------------------------------


def _sizes(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--block-sizes {text}: give whole numbers separated by commas (18,36)") from None


def cmd_topology(args) -> int:
    from fabricops import cliopts
    from fabricops.sched import labels, sources
    from fabricops.sched import topology as topo

    if args.check and not args.output:
        raise UsageError("--check compares a file: give it with --output FILE")
    if args.output is not None and not str(args.output).strip():
        raise UsageError("--output was given an empty file name")
    sizes = _sizes(args.block_sizes)
    extra = cliopts.extra_vars(args.extra_vars)
    fab = open_inventory(args.inventory, args.limit)
    hosts = list(fab.hosts)
    hostvars = {h: {**fab.hostvars(h), **extra} for h in hosts}

    def hv(host: str) -> dict[str, Any]:
        if host not in hostvars:
            hostvars[host] = {**(fab.inventory_vars(host) or {}), **extra}
        return hostvars[host]

    notes: list[str] = []
    if args.format == "block":
        domains = {h: hv(h)[DOMAIN_VAR] for h in hosts if hv(h).get(DOMAIN_VAR) not in (None, "")}
        text = topo.block_conf(domains, sizes, {h: hv(h).get(NODE_NAME_VAR) or h for h in domains})
    else:
        layers = fab.switch_link_layers() if hasattr(fab, "switch_link_layers") else {}
        cab = _cabling(args, fab, hosts, hostvars, layers, sources)
        sel = topo.select(cab, args.fabric)
        name_var = K8S_NAME_VAR if args.format == "k8s-labels" else NODE_NAME_VAR
        node_names = {p.host: hv(p.host).get(name_var) or p.host for p in sel.ports}
        tree = topo.build_tree(sel, node_names, args.rail)
        notes += tree.notes
        if args.format == "tree":
            text = topo.render_tree(tree, sel.describe())
        else:
            domains = {}
            for h in sorted({*hosts, *node_names}):
                dom = hv(h).get(DOMAIN_VAR)
                if dom not in (None, ""):
                    domains[node_names.get(h) or hv(h).get(K8S_NAME_VAR) or h] = dom
            if not domains:
                notes.append(
                    "no host declares an NVLink domain (fabricops_nvlink_domain): no accelerator label"
                )
            where = f"the {tree.network} fabric's cabling {sel.describe()}"
            text = labels.render(labels.node_labels(tree, domains), where)
    if not args.quiet:
        for n in notes:
            print(f"fabricops topology: note: {n}", file=sys.stderr)
    if not args.output:
        sys.stdout.write(text)
        return EXIT_OK
    return _output(Path(args.output), text, args.check)


def _cabling(args, fab, hosts, hostvars, layers, sources) -> Any:
    if args.source == "plan":
        return sources.plan(hostvars, hosts, layers)
    roce = next((v.get("fabricops_roce") for v in hostvars.values() if v.get("fabricops_roce")), None)
    reader = fab.switch_reader(roce) if hasattr(fab, "switch_reader") else None
    return sources.as_built(fab.run, hosts, hostvars, layers, args.fabric, switch_reader=reader,
                            switch_lldp=getattr(fab, "switch_lldp", None), timeout=args.timeout)


# --- writing only what changed ------------------------------------------------------------------


def read_current(path: Path) -> str | None:
    """The file's text; None when it does not exist. A link, a directory or another non-regular file
    is refused (4): the file is replaced by rename, never written through a link."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CouldNotRun(f"{path}: cannot read ({exc.strerror or exc})") from None
    if stat.S_ISLNK(st.st_mode):
        raise CouldNotRun(
            f"{path} is a symbolic link; give the real path (the file is replaced, not written through links)"
        )
    if not stat.S_ISREG(st.st_mode):
        raise CouldNotRun(f"{path} is not a regular file; give a file name")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CouldNotRun(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None


def write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` when its content differs: a new file in the same directory
    (mode 0644, flushed to disk) renamed over it, so a reader sees the old file or the new one,
    never half of one. True when written, False when the file already held ``text``."""
    if read_current(path) == text:
        return False
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise CouldNotRun(f"{path}: the directory {parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise CouldNotRun(f"{path}: cannot write in {parent} ({exc.strerror or exc})") from None
    try:
        os.fchmod(fd, FILE_MODE)
        data = text.encode("utf-8")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except OSError as exc:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise CouldNotRun(f"{path}: cannot write ({exc.strerror or exc})") from None
    return True


def _output(path: Path, text: str, check: bool) -> int:
    if check:
        current = read_current(path)
        if current == text:
            print(f"{path}: unchanged")
            return EXIT_OK
        if current is None:
            print(f"{path}: does not exist (it would be written)")
            return EXIT_DRIFT
        diff = difflib.unified_diff(current.splitlines(True), text.splitlines(True),
                                    f"{path} (on disk)", f"{path} (generated)")
        sys.stdout.writelines(diff)
        print(f"{path}: differs from what would be generated")
        return EXIT_DRIFT
    print(f"{path}: {'written' if write_if_changed(path, text) else 'unchanged'}")
    return EXIT_OK


__all__ = ["cmd_topology", "read_current", "register", "write_if_changed"]
