"""The lab's NIC firmware images (lab/firmware_images.py) and the inventory's firmware pins."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json

from fabricops.parsers import mlxfwmanager as mgrp
from fabricops_lab import firmware_images, hardware, inventory, topology
from fabricops_lab.emul import firmware

TOPO = topology.load()


def test_current_and_newer_image_per_psid_with_checksums(tmp_path):
    facts = firmware_images.build(TOPO, tmp_path)
    psids = {h["psid"] for host in TOPO["hosts"]
             for h in hardware.hardware_json(TOPO, host, kernel="k")["hcas"]}
    assert set(facts["images"]) == psids
    sums = dict(reversed(line.split("  ")) for line in (tmp_path / "SHA256SUMS").read_text().splitlines())
    for imgs in facts["images"].values():
        assert len(imgs) == 2 and imgs[0]["version"] != imgs[1]["version"]
        for img in imgs:
            name = img["url"].rsplit("/", 1)[1]
            assert img["url"].startswith("http://198.51.100.1:8080/firmware/fw-")
            assert hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() == img["sha256"] == sums[name]
    cx7 = facts["images"]["MT_0000000838"]
    assert [i["version"] for i in cx7] == ["28.39.1002", "28.43.1014"]
    assert cx7[1]["url"].endswith(
        "/fw-ConnectX7-rel-28_43_1014-MCX75310AAS-NEA_Ax-UEFI-14.36.16-FlexBoot-3.7.500.signed.bin")


def test_inventory_pins_what_the_lab_runs(tmp_path):
    v = firmware_images.inventory_vars(TOPO)
    running = {h["psid"]: h["fw_ver"] for host in TOPO["hosts"]
               for h in hardware.hardware_json(TOPO, host, kernel="k")["hcas"]}
    assert v["nic_firmware_versions"] == running
    facts = firmware_images.build(TOPO, tmp_path)
    for psid, img in v["nic_firmware_images"].items():
        assert img == {"url": facts["images"][psid][0]["url"], "sha256": facts["images"][psid][0]["sha256"]}
    assert v["fabricops_nic_firmware_catalog"] == facts["images"]


def test_all_yml_carries_the_firmware_vars():
    lab = {"name": TOPO["name"], "topology": TOPO, "hosts": {}, "switches": {}}
    data = inventory.all_yml(lab, None)
    assert data["nic_firmware_versions"] == firmware_images.inventory_vars(TOPO)["nic_firmware_versions"]
    assert set(data["nic_firmware_images"]) == set(data["nic_firmware_versions"])


def test_served_image_is_what_the_emulated_mlxfwmanager_burns(tmp_path, monkeypatch):
    monkeypatch.setenv("EMUL_ROOT", str(tmp_path / "root"))
    hw = hardware.hardware_json(TOPO, TOPO["hosts"][0], kernel="k")
    (tmp_path / "root/var/lib/emulated-hw").mkdir(parents=True)
    (tmp_path / "root/var/lib/emulated-hw/hardware.json").write_text(json.dumps(hw))
    facts = firmware_images.build(TOPO, tmp_path / "fw")
    hca = hw["hcas"][0]
    newer = facts["images"][hca["psid"]][1]
    path = tmp_path / "fw" / newer["url"].rsplit("/", 1)[1]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = firmware.mlxfwmanager(["-d", hca["pci"], "-i", str(path), "-u", "-y"])
    assert rc == 0, out.getvalue()
    assert mgrp.parse_query(out.getvalue())[0]["versions"]["FW"]["available"] == newer["version"]
    assert firmware.load_state(hca)["burned"] == newer["version"]


def test_lab_up_builds_the_images_after_the_ofed_repository(tmp_path, monkeypatch):
    from fabricops_lab import paths, rack

    monkeypatch.setattr(paths, "STATE_DIR", tmp_path)
    calls = []

    class Ofed:
        @staticmethod
        def prepare(lab):
            calls.append("ofed")
            return {"pid": 1}

    class Images:
        @staticmethod
        def prepare(lab):
            calls.append("firmware_images")
            return {"url": "http://198.51.100.1:8080/firmware/", "images": {}}

    mods = {"switches": None, "ofed_repo": Ofed, "fabric_services": None, "firmware_images": Images,
            "doca_repo": None}
    monkeypatch.setattr(rack, "_service", lambda name: mods[name])
    lab = {"name": "t", "hosts": {}}
    rack._start_services(lab)
    assert calls == ["ofed", "firmware_images"]
    assert paths.load_lab()["nic_firmware"]["url"] == "http://198.51.100.1:8080/firmware/"
