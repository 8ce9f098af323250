"""``fabricops plan``: size a GPU training fabric and write its inventory and a lab slice.

Modules: :mod:`.catalog` (switch catalogue and guidance data), :mod:`.traffic` (communication per
step), :mod:`.sizing` (fat tree / Dragonfly+), :mod:`.recommend` (scenario and whole plan),
:mod:`.writers` (inventory skeleton, lab topology), :mod:`.cli`. See docs/plan.md.
"""

from fabricops.plan.cli import register

__all__ = ["register"]
