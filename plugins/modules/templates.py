#!/usr/bin/python
# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""Documentation only: fabricops.fabric.templates is an action plugin (plugins/action/templates.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: templates
short_description: Write a role's templates, reading all their destinations in one round trip
description:
  - Renders each template of O(files) on the controller as M(ansible.builtin.template) does (its
    defaults), reads every destination in one M(fabricops.fabric.host_read) run, and skips each file
    whose content, mode, owner and group are already exactly that.
  - Every other file (different, missing, a symlink, not readable as a rendered template here) is
    handed to M(ansible.builtin.template) with the same options, one file at a time, so writing,
    check mode and diff are that module's. A task with N files that are all in place costs one module
    run instead of 2N.
  - On an ansible-core older than 2.19 every file goes to M(ansible.builtin.template) (the same
    result, without the saving).
version_added: 0.1.0
author: fabricops developers (@fabricops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  read:
    description:
      - A M(fabricops.fabric.host_read) result registered earlier in the run, before anything wrote
        these destinations. A destination it both read (O(fabricops.fabric.host_read#module:files)) and
        looked at (O(fabricops.fabric.host_read#module:stats)) is compared with that read and not read
        again, so a role's one probe can serve its templates too and a task whose files are all in
        place costs no module run at all.
      - A destination missing from it, or a failed or skipped result, is read by this task as usual.
    type: dict
    default: {}
  files:
    description: The files to write, in order.
    type: list
    elements: dict
    required: true
    suboptions:
      src:
        description: The template, found as M(ansible.builtin.template) finds it (the role's C(templates/)).
        type: str
        required: true
      dest:
        description: Absolute path of the file on the host; each path once per task.
        type: str
        required: true
      mode:
        description: Octal mode, such as V(0644).
        type: str
        required: true
      owner:
        description: Owner (a user name).
        type: str
        default: root
      group:
        description: Group (a group name).
        type: str
        default: root
      vars:
        description: >-
          Variables for this file's template only (what C(loop_var) gave a looped
          M(ansible.builtin.template) task).
        type: dict
        default: {}
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details: A file that differs is reported by M(ansible.builtin.template) in check mode.
  diff_mode:
    support: full
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Write the NCCL configuration and the login-shell profile
  fabricops.fabric.templates:
    files:
      - {src: nccl.conf.j2, dest: /etc/nccl.conf, mode: "0644"}
      - {src: nccl.sh.j2, dest: /etc/profile.d/nccl.sh, mode: "0644"}
  register: written

- name: One read of the host for the whole role, its templates' destinations included
  fabricops.fabric.host_read:
    commands:
      unit: [systemctl, show, --property=UnitFileState, example.service]
    files: {unit_file: /etc/systemd/system/example.service}
    stats: {unit_file: /etc/systemd/system/example.service}
  register: probe

- name: Write the unit (compared with the probe's read; no module run when it is in place)
  fabricops.fabric.templates:
    read: "{{ probe }}"
    files:
      - {src: example.service.j2, dest: /etc/systemd/system/example.service, mode: "0644"}
"""

RETURN = r"""
results:
  description: >-
    One entry per file, in order, shaped like a loop's results: V(item) and V(dest) (the path), V(src),
    V(changed), V(checked) (V(same): skipped after the read; V(template): handed to
    M(ansible.builtin.template)), V(existed) (whether the path existed before the task; in check mode
    a new file is reported, not written, so a later task can tell that it is still absent) and, in
    diff mode, that file's V(diff).
  returned: always
  type: list
  elements: dict
  sample: [{"item": "/etc/nccl.conf", "dest": "/etc/nccl.conf", "src": "nccl.conf.j2", "changed": false,
            "checked": "same", "existed": true}]
"""
