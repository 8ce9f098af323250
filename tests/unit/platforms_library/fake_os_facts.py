#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
"""Test-only module: returns the given dict as ``ansible_facts`` (a host that says it is SLES,
Rocky or Ubuntu, for tests/unit/test_host_platforms.py's real play against the roles)."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(argument_spec={"facts": {"type": "dict", "required": True}})
    module.exit_json(changed=False, ansible_facts=module.params["facts"])


if __name__ == "__main__":
    main()
