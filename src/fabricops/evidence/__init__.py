"""Host evidence, read once: the one copy of each parser of what a host says.

verify, diagnose and the monitor collector read host evidence (sysfs, ``/etc/nccl.conf``, tool
output) through these modules, never through a parser of their own (docs/architecture.md,
"Evidence read once, judged by rules"). Every module here is stdlib-only: the collector is shipped
to hosts with the evidence modules it needs (fabricops.hostside.ship) and runs there with nothing
but the standard library. This ``__init__`` imports nothing, so a shipped copy stays light.
"""
