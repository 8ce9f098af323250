# SPDX-License-Identifier: Apache-2.0
"""Task options of the action plugins, validated by Ansible's own argument-spec code.

Every action plugin of the collection passes its task arguments through :func:`validate_options`:
types are converted as a module's would be (``"false"`` from ``-e`` or k=v is false, ``ports=Eth1/1``
is a one-element list), defaults are applied, and an unknown option or a wrong type fails the task
with one sentence that names it. Nothing reaches a host or a switch before this passes.
"""

from __future__ import annotations

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.errors import UnsupportedError

_SUPPORTED = ". Supported parameters include: "


class OptionsError(ValueError):
    """Task options that do not validate; the message is one sentence."""


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def validate_options(name: str, spec: dict, raw) -> dict:
    """``raw`` task arguments -> validated parameters, or :class:`OptionsError` (one sentence).

    ``None`` values count as not given (``default(omit)`` and an unset variable read the same).
    """
    given = {k: v for k, v in dict(raw or {}).items() if v is not None}
    result = ArgumentSpecValidator(spec).validate(given)
    if not result.error_messages:
        return result.validated_parameters
    parts = []
    for err in result.errors:
        msg = str(err.msg if hasattr(err, "msg") else err).rstrip(".")
        if isinstance(err, UnsupportedError) and _SUPPORTED in msg:
            unknown, supported = msg.split(_SUPPORTED, 1)
            msg = f"unknown option(s) {unknown} (supported: {supported})"
        parts.append(msg)
    raise OptionsError(_printable(f"{name}: " + "; ".join(parts) + "."))
