"""The port data counters a fake transport answers: what the hardware would count.

A fake perftest client that "ran" credits the bytes its output reports (size x iterations) to its
own port's transmit counter and to the peer port's receive counter, as the HCAs would; the
negative-control reads (``perfquery -x -C HCA -P PORT`` for InfiniBand, ``cat`` of the sysfs
``port_xmit_data`` / ``port_rcv_data`` for RoCE) answer from those counters in the real tools'
formats and 4-octet units. ``wrong`` maps (host, hca) -> the hca that really carries its traffic
(the wrong-device fault)."""

from __future__ import annotations

import re
import threading

from fabricops.parsers import parse

_PQ = re.compile(r"^perfquery -x -C (\S+) -P (\d+)$")
_CAT = re.compile(r"^cat /sys/class/infiniband/([^/]+)/ports/(\d+)/counters/port_xmit_data ")


def _pq(name, value):
    return f"{name + ':':.<33}{value}"


class PortCounters:
    def __init__(self, wrong=None, base=10**12):
        self.words: dict[tuple[str, str], list[int]] = {}
        self.wrong = dict(wrong or {})
        self.base = base
        self.reads: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def _get(self, host, hca):
        return self.words.setdefault((host, hca), [self.base, self.base // 2])

    def credit(self, host, hca, peer, peer_hca, perftest_text):
        """The client on host/hca moved what its output reports to peer/peer_hca."""
        rec = parse("perftest-bw", perftest_text)
        moved = sum(r.bytes * r.iterations for r in rec.results)
        with self.lock:
            self._get(host, self.wrong.get((host, hca), hca))[0] += moved // 4
            self._get(peer, self.wrong.get((peer, peer_hca), peer_hca))[1] += moved // 4

    def answer(self, host, cmd):
        """The result of a counter read, or None when ``cmd`` is not one."""
        m = _PQ.match(cmd)
        if m:
            hca, port = m.group(1), m.group(2)
            with self.lock:
                self.reads.append((host, hca))
                x, r = self._get(host, hca)
            lines = [f"# Port extended counters: Lid 5 port {port} (CapMask: 0x5A00 CapMask2: 0x0000002)",
                     _pq("PortSelect", port), _pq("CounterSelect", "0x0000"), _pq("PortXmitData", x),
                     _pq("PortRcvData", r), _pq("PortXmitPkts", x // 1024), _pq("PortRcvPkts", r // 1024),
                     _pq("CounterSelect2", "0x00000000"), _pq("SymbolErrorCounter", 0)]
            return {"rc": 0, "stdout": "\n".join(lines) + "\n", "stderr": ""}
        m = _CAT.match(cmd)
        if m:
            with self.lock:
                self.reads.append((host, m.group(1)))
                x, r = self._get(host, m.group(1))
            return {"rc": 0, "stdout": f"{x}\n{r}\n", "stderr": ""}
        return None
