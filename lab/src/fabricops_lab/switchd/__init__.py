"""Emulated NVIDIA Spectrum switches (Onyx and Cumulus NVUE) as asyncssh servers.

One process per switch (``python -m fabricops_lab.switchd``). netmiko's own ``mellanox_mlnxos`` and
``cumulus_linux`` drivers drive them unchanged. See docs/lab-switches.md.
"""
