"""Monitoring: the host-side collector (``collector``, stdlib only) and the alert rules (``rules``)."""
