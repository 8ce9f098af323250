"""python -m fabricops.lab.switchd --name NAME --os onyx|cumulus --listen ADDR --port PORT ..."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from .server import serve


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fabricops.lab.switchd", description=__doc__)
    ap.add_argument("--name", required=True)
    ap.add_argument("--os", required=True, choices=["onyx", "cumulus"], dest="os_name")
    ap.add_argument("--listen", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=22)
    ap.add_argument("--host-key", required=True, help="created (ed25519) when missing")
    ap.add_argument("--password-file", required=True)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--fabric-file", default=None, help="normalised switches/NAME.json to write")
    ap.add_argument("--ports", required=True, help="Eth1/1,Eth1/2,... or swp1,swp2,...")
    ap.add_argument("--ready-file", default=None, help="touched once the server listens")
    a = ap.parse_args(argv)
    password = Path(a.password_file).read_text(encoding="utf-8").strip()
    ports = [p.strip() for p in a.ports.split(",") if p.strip()]

    async def run() -> None:
        acceptor = await serve(
            a.os_name, a.name, ports, a.listen, a.port, a.host_key, password, a.state_dir, a.fabric_file
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
