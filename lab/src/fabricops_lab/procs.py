"""Whether a lab process (a host's systemd-nspawn, a switch daemon, the repository server) lives.

One answer for every caller: a process that is gone, or a zombie waiting to be reaped, is not alive.
The process can be reaped at any moment between two looks at /proc, so every read tolerates that.
"""

from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else; its state below says whether it is a zombie
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False  # reaped between the signal check and this read (CI stop 31)
    except OSError:
        return True
    # the state follows the command name, which is in parentheses and may itself hold ") "
    return not stat.rpartition(") ")[2].startswith("Z")
