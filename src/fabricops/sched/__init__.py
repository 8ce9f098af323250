"""The fabric's shape for schedulers (``fabricops topology``): Slurm ``topology.conf`` (tree from the
cabling, block from declared NVLink domains) and Kubernetes node labels, from the cabling as
planned (the inventory) or as built (verify's cabling reads). docs/scheduler-topology.md.

Imports point one way: this package reads :mod:`fabricops.verify.cabling` and
:mod:`fabricops.model.fabric`; it never imports the lab.
"""

from fabricops.sched.topology import Cabling, HostPort, Link, Tree, block_conf, build_tree, tree_conf

__all__ = ["Cabling", "HostPort", "Link", "Tree", "block_conf", "build_tree", "tree_conf"]
