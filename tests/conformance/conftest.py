"""Conformance: real clients nobody on this project wrote, against the emulated switches."""
