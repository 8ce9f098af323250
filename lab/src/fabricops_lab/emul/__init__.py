"""Emulated silicon and vendor tools for lab hosts (stdlib only; see docs/lab-device-contract.md)."""
