"""NIC firmware images the lab serves (SPEC-20 C): ``http://198.51.100.1:8080/firmware/``.

For every PSID in the lab's topology two emulated images are built: one at the version the lab's
NICs run (so a fresh lab, pinned to it, is compliant) and a newer one (so an update can be
tested). Names follow NVIDIA's download names, e.g.
``fw-ConnectX7-rel-28_43_1014-MCX75310AAS-NEA_Ax-UEFI-14.36.16-FlexBoot-3.7.500.signed.bin``
(the name of the ConnectX-7 image in NVIDIA's firmware downloads; the ROM versions of the
28.43.1014 image are those a public ``flint query`` of it prints). A device type without a known
part number is named by its PSID instead. The file is what the emulated ``mlxfwmanager -i``
reads (emul/firmware.py ``image_text``: PSID and version inside); ``SHA256SUMS`` lists them in
``sha256sum`` format. Everything is a pure function of the topology, so the inventory
(lab/inventory.py) derives the same URLs and checksums without the build.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Any

from fabricops_lab import hardware, ofed_repo, paths
from fabricops_lab.emul import firmware as fw

SUBDIR = "firmware"
#: the newer release per device type (hardware.json hca_type): ConnectX-7 28.43.1014 as NVIDIA
#: publishes it; the others one minor release above the lab's version, same scheme
NEWER = {"MT4129": "28.43.1014"}


def _newer(version: str, hca_type: str) -> str:
    if hca_type in NEWER:
        return NEWER[hca_type]
    major, minor, _sub = (int(x) for x in version.split("."))
    return f"{major}.{minor + 4}.1014"


def _rom_name(v: str) -> str:
    """'14.36.0016' -> '14.36.16' (the file names drop the leading zeros)."""
    return ".".join(str(int(x)) for x in v.split("."))


def image_name(dev_type: str, part: str | None, psid: str, version: str) -> str:
    roms = fw.DEFAULT_ROMS
    return (f"fw-{dev_type}-rel-{version.replace('.', '_')}-{part or psid}-UEFI-{_rom_name(roms['UEFI'])}"
            f"-FlexBoot-{_rom_name(roms['PXE'])}.signed.bin")


def lab_devices(topo: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """PSID -> {"hca_type", "version" (what most of the lab's NICs of that PSID run)}."""
    seen: dict[str, Counter] = {}
    types: dict[str, str] = {}
    for host in topo.get("hosts") or []:
        hw = hardware.hardware_json(topo, host, kernel="emulated")
        for hca in hw["hcas"]:
            seen.setdefault(hca["psid"], Counter())[hca["fw_ver"]] += 1
            types[hca["psid"]] = hca["hca_type"]
    return {psid: {"hca_type": types[psid], "version": c.most_common(1)[0][0]}
            for psid, c in sorted(seen.items())}


def catalog(topo: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """PSID -> [{"name", "version", "data" (bytes), "sha256"}], current first, then the newer one."""
    out: dict[str, list[dict[str, Any]]] = {}
    for psid, dev in lab_devices(topo).items():
        dev_type, part, _ = fw.DEVICE_TYPES.get(dev["hca_type"], ("ConnectX7", None, ""))
        for version in (dev["version"], _newer(dev["version"], dev["hca_type"])):
            data = fw.image_text(psid, version, dev_type, part, fw.DEFAULT_ROMS).encode()
            out.setdefault(psid, []).append({
                "name": image_name(dev_type, part, psid, version), "version": version, "data": data,
                "sha256": hashlib.sha256(data).hexdigest(),
            })
    return out


def base_url() -> str:
    return f"http://{ofed_repo.CONTROLLER_IP}:{ofed_repo.HTTP_PORT}/{SUBDIR}"


def inventory_vars(topo: dict[str, Any]) -> dict[str, Any]:
    """``nic_firmware_versions`` (pinned to what the lab runs) and ``nic_firmware_images``."""
    cat = catalog(topo)
    return {
        "nic_firmware_versions": {psid: imgs[0]["version"] for psid, imgs in cat.items()},
        "nic_firmware_images": {
            psid: {"url": f"{base_url()}/{imgs[0]['name']}", "sha256": imgs[0]["sha256"]}
            for psid, imgs in cat.items()
        },
        # every image the lab serves (the current one and a newer one per PSID), for update tests
        "fabricops_nic_firmware_catalog": {
            psid: [{"version": i["version"], "url": f"{base_url()}/{i['name']}", "sha256": i["sha256"]}
                   for i in imgs]
            for psid, imgs in cat.items()
        },
    }


def build(topo: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """Write the images and SHA256SUMS into out_dir; return the facts (``lab["nic_firmware"]``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sums = []
    images: dict[str, list[dict[str, str]]] = {}
    for psid, imgs in catalog(topo).items():
        for img in imgs:
            (out_dir / img["name"]).write_bytes(img["data"])
            sums.append(f"{img['sha256']}  {img['name']}\n")
            images.setdefault(psid, []).append({
                "version": img["version"], "url": f"{base_url()}/{img['name']}", "sha256": img["sha256"],
            })
    (out_dir / "SHA256SUMS").write_text("".join(sorted(sums)))
    return {"url": f"{base_url()}/", "images": images}


def prepare(lab: dict[str, Any]) -> dict[str, Any]:
    """Build the images under the served directory (call after ``ofed_repo.prepare``, whose
    rebuild clears ``repo_dir()``)."""
    return build(lab["topology"], paths.repo_dir() / SUBDIR)
