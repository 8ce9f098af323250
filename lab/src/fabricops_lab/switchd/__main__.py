"""python -m fabricops_lab.switchd --name NAME --os onyx|cumulus --listen ADDR --port PORT ..."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from .server import serve


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fabricops_lab.switchd", description=__doc__)
    ap.add_argument("--name", required=True)
    ap.add_argument("--os", required=True, choices=["onyx", "cumulus"], dest="os_name")
    ap.add_argument("--listen", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=22)
    ap.add_argument("--host-key", required=True, help="created (ed25519) when missing")
    ap.add_argument("--password-file", default=None, help="the login password (none: no password login)")
    ap.add_argument("--authorized-keys", default=None, help="OpenSSH authorized_keys for public-key login")
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--fabric-file", default=None, help="normalised switches/NAME.json to write")
    ap.add_argument("--ports", required=True, help="Eth1/1,Eth1/2,... or swp1,swp2,...")
    ap.add_argument("--ready-file", default=None, help="touched once the server listens")
    ap.add_argument(
        "--release", default=None,
        help="the OS release to answer as (Onyx: 3.10.4504, 3.9.3202, 3.6.5000; Cumulus: 5.4, 5.14)",
    )
    ap.add_argument(
        "--api-port", type=int, default=None, help="Cumulus: serve the NVUE REST API (HTTPS) here"
    )
    a = ap.parse_args(argv)
    if not a.password_file and not a.authorized_keys:
        ap.error("give --password-file, --authorized-keys or both")
    password = Path(a.password_file).read_text(encoding="utf-8").strip() if a.password_file else None
    # the accepted login methods go to the switch's log (switchd.log), as sshd logs them
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
    ports = [p.strip() for p in a.ports.split(",") if p.strip()]

    async def run() -> None:
        acceptor = await serve(
            a.os_name,
            a.name,
            ports,
            a.listen,
            a.port,
            a.host_key,
            password,
            a.state_dir,
            a.fabric_file,
            authorized_keys=a.authorized_keys,
            release=a.release,
            api_port=a.api_port,
        )
        if a.ready_file:
            Path(a.ready_file).write_text(f"{a.port}\n", encoding="utf-8")
        await acceptor.wait_closed()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
