"""Host RoCE QoS on the controller: desired (from ``fabricops.model.roce``) vs current -> changes.

- :mod:`fabricops.hostqos.mlnx_qos` -- trust, PFC vector, DSCP->priority entries, cable length
  (read with ``fabricops.parsers.mlnx_qos``, changed with ``mlnx_qos`` argument groups)
- :mod:`fabricops.hostqos.knobs` -- the RoCE sysfs / rdma_cm knobs per port, one table that both
  reads and writes them
- :mod:`fabricops.hostqos.plan` -- which ports, and the per-port desired state the role, the
  modules and the boot-time apply script share

The Ansible action plugins ``fabricops.fabric.mlnx_qos``, ``roce_sysfs`` and ``roce_plan`` are thin
shims over these. ``mlnx_qos`` and ``knobs`` are stdlib-only: they also run on the hosts, inside the
boot-time program :mod:`fabricops.hostside.roce_boot` (``plan`` stays on the controller; the config
the program reads is its output). See docs/roce.md.
"""
