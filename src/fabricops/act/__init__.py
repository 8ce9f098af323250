"""``fabricops act``: from a verify report to actions on the scheduler and the fabric (docs/act.md).

table (the action table, data in actions.yml) -> plan (findings, Slurm state, safety rails; pure)
-> slurm (scontrol argv, the runner seam, the node parser), quarantine (a switch port shut through
the switch platforms, under the switch's lock) and state (the action log); cli wires them with the
inventory. The command's ``register(subparsers)`` is :mod:`fabricops.act.cli`.
"""
