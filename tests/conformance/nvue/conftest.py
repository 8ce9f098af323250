"""An emulated Cumulus NVUE switch on 127.0.0.1 (SSH and its HTTPS REST API), per test."""

from __future__ import annotations

import asyncio
import json
import socket
import threading

import pytest

from fabricops_lab.switchd.server import close, serve

PASSWORD = "conf-secret"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NvueLab:
    def __init__(self, tmp_path, release):
        self.tmp = tmp_path
        self.password = PASSWORD
        self.port = _free_port()
        self.fabric = tmp_path / "fabric.json"
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        fut = asyncio.run_coroutine_threadsafe(
            serve(
                "cumulus",
                "leaf-nv",
                [f"swp{n}" for n in range(1, 5)],
                "127.0.0.1",
                self.port,
                str(tmp_path / "hostkey"),
                PASSWORD,
                str(tmp_path / "state"),
                str(self.fabric),
                release=release,
                api_port=0,
            ),
            self.loop,
        )
        self.acceptor = fut.result(15)
        self.switch = self.acceptor._fabricops_switch
        self.api = self.acceptor._fabricops_api

    def fabric_state(self):
        return json.loads(self.fabric.read_text())

    def close(self):
        asyncio.run_coroutine_threadsafe(close(self.acceptor), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(params=["5.4", "5.14"])
def nvue_lab(request, tmp_path):
    lab = NvueLab(tmp_path, request.param)
    yield lab
    lab.close()

