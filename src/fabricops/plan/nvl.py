"""Multi-node NVLink racks (GB200 / GB300 NVL72): NVLink domains and their compute trays (docs/plan.md).

A compute tray is one server of the profile (``gpu.count`` GPUs, ``hca.count`` HCAs); an NVLink
domain holds up to the profile's ``nvlink_domain.max_nodes`` trays (18: 72 GPUs). ``--domain-size``
asks for smaller domains. Trays fill domains in order (``gpu01``.. in ``nvl72-01``, then
``nvl72-02``, ...), so adding racks appends domains and never renames one; a last domain with fewer
trays is allowed and reported.

The rack configurations and their NVLink switch trays are the table :data:`CONFIGURATIONS`, each row
with its public source. Every GPU's 18 NVLink 5 links run to the NVLink switch trays of its domain
(REFERENCE.md, NVLink), so a domain smaller than its rack still has the rack's switch trays.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from fabricops.model.profiles import Profile, ProfileError, load_profile
from fabricops.plan import catalog
from fabricops.plan.catalog import PlanInputError

__all__ = [
    "CONFIGURATIONS",
    "DEFAULT_CONFIGURATION",
    "DOMAIN_PREFIX",
    "NVLConfig",
    "NVLinkPlan",
    "domain_names",
    "load",
    "scale_out_switch",
    "size_domains",
]

#: the name every NVLink domain gets: nvl72-01, nvl72-02, ... (the NVL72 rack, or rack pair for 36x2)
DOMAIN_PREFIX = "nvl72"
DEFAULT_CONFIGURATION = "72x1"


@dataclass(frozen=True)
class NVLConfig:
    """One rack configuration of an NVLink domain."""

    name: str  #: "72x1" (one rack) or "36x2" (two racks)
    racks: int  #: racks per NVLink domain
    trays_per_rack: int  #: compute trays per rack
    switch_trays_per_rack: int  #: NVLink switch trays per rack
    doc: str  #: the document, by title
    source: str  #: the document, its address and what it says

    @property
    def max_trays(self) -> int:
        return self.racks * self.trays_per_rack



_GB200_DOC = "NVIDIA GB200 NVL Multi-Node Tuning Guide"
_TUNING_GUIDE = (
    f"{_GB200_DOC}, 'Understanding Your Grace-Blackwell Systems' "
    "(docs.nvidia.com/multi-node-nvlink-systems/multi-node-tuning-guide/system.html)"
)
_GB300_DOC = "NVIDIA Enterprise Reference Architecture NVL72 AI factory"
#: platform (the profile's ``platform``) -> configuration name -> configuration. First row: the default.
CONFIGURATIONS: dict[str, dict[str, NVLConfig]] = {
    "gb200-nvl72": {
        "72x1": NVLConfig(
            "72x1", 1, 18, 9, _GB200_DOC,
            f"{_TUNING_GUIDE}: 72x1 - one rack, 18 1RU compute trays (4 GPUs each), 9 1RU NVL72 NVLink "
            "switch trays",
        ),
        "36x2": NVLConfig(
            "36x2", 2, 9, 9, _GB200_DOC,
            f"{_TUNING_GUIDE}: 36x2 - each of two racks has 9 2RU compute trays and 9 1RU NVL36 NVLink "
            "switch trays",
        ),
    },
    "gb300-nvl72": {
        "72x1": NVLConfig(
            "72x1", 1, 18, 9, _GB300_DOC,
            f"{_GB300_DOC}, 'System Hardware & Components' "
            "(docs.nvidia.com/enterprise-reference-architectures/nvl72-ai-factory/latest/components.html): "
            "9 NVSwitch trays connect the 72 Blackwell Ultra GPUs of a GB300 NVL72 rack, 4 per compute tray",
        ),
    },
}


def load(name: str, asked: str = "--profile") -> Profile:
    """The hardware profile ``name`` (shipped or a file) with a multi-node NVLink domain;
    PlanInputError (one sentence) otherwise. ``asked`` names the flag that needs the domain."""
    try:
        prof = load_profile(name)
    except ProfileError as exc:
        raise PlanInputError(str(exc)) from None
    if prof.nvlink_domain is None:
        raise PlanInputError(
            f"{asked} needs a hardware profile with a multi-node NVLink domain (gb200-nvl72, gb300-nvl72), "
            f"and {prof.name}'s NVLink fabric ends at the server: plan HGX nodes with --gpus-per-node and "
            "--switch instead"
        )
    if prof.platform not in CONFIGURATIONS:
        raise PlanInputError(
            f"hardware profile {prof.name} (platform {prof.platform}) has no NVLink rack configuration "
            f"fabricops knows ({', '.join(CONFIGURATIONS)})"
        )
    return prof


def configuration(prof: Profile, name: str | None) -> NVLConfig:
    rows = CONFIGURATIONS[str(prof.platform)]
    key = name or next(iter(rows))
    if key not in rows:
        raise PlanInputError(
            f"--nvl-config {key} is not a documented configuration of {prof.platform} "
            f"(use {' or '.join(rows)})"
        )
    cfg = rows[key]
    assert prof.nvlink_domain is not None
    if cfg.max_trays != prof.nvlink_domain.max_nodes:  # the table and the profile must agree
        raise PlanInputError(
            f"--nvl-config {key} holds {cfg.max_trays} compute trays per NVLink domain, profile {prof.name} "
            f"says {prof.nvlink_domain.max_nodes} (nvlink_domain.max_nodes): fix one of them"
        )
    return cfg


def domain_names(n: int) -> list[str]:
    """nvl72-01 .. nvl72-NN (the width grows past 99)."""
    width = max(2, len(str(n)))
    return [f"{DOMAIN_PREFIX}-{i:0{width}d}" for i in range(1, n + 1)]


@dataclass
class NVLinkPlan:
    """The NVLink domains of a plan on multi-node NVLink compute trays."""

    profile: str  #: the hardware profile as given (a name or a file)
    platform: str
    configuration: str  #: "72x1" or "36x2"
    gpus: int
    gpus_per_tray: int
    hcas_per_tray: int
    nvlink: int  #: NVLink generation of the GPUs (the profile's gpu.nvlink)
    trays: int
    domain_size: int  #: compute trays per (full) NVLink domain
    max_domain_size: int  #: the profile's nvlink_domain.max_nodes
    domains: int
    full_domains: int
    last_domain_trays: int  #: trays of the last domain (== domain_size when every domain is full)
    racks: int  #: racks of all domains (a domain fills ceil(trays / trays per rack) racks)
    switch_trays_per_domain: int  #: NVLink switch trays of a full domain (its racks' switch trays)
    switch_trays: int  #: NVLink switch trays of all domains
    domain_trays: dict[str, int] = field(default_factory=dict)  #: domain name -> compute trays
    doc: str = ""  #: the document the configuration comes from, by title
    source: str = ""

    @property
    def partial(self) -> bool:
        return self.last_domain_trays != self.domain_size

    def domain_of(self, tray: int) -> str:
        """The domain of tray number ``tray`` (0-based, in host order)."""
        return domain_names(self.domains)[tray // self.domain_size]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["partial"] = self.partial
        return d


def _whole(value: Any, flag: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanInputError(f"{flag} must be a positive whole number, not {value!r}")
    return value


def size_domains(
    prof: Profile,
    gpus: int | None = None,
    domains: int | None = None,
    domain_size: int | None = None,
    config: str | None = None,
    profile_name: str | None = None,
) -> NVLinkPlan:
    """NVLink domains for ``gpus`` GPUs (or ``domains`` full domains) of compute trays of ``prof``."""
    assert prof.nvlink_domain is not None
    cfg = configuration(prof, config)
    per_tray = prof.gpu.count
    most = prof.nvlink_domain.max_nodes
    size = most if domain_size is None else _whole(domain_size, "--domain-size")
    if size > most:
        raise PlanInputError(
            f"--domain-size {size} is more than the {most} compute trays one NVLink domain of {prof.name} "
            f"holds (nvlink_domain.max_nodes): use 1 to {most}"
        )
    if (gpus is None) == (domains is None):
        raise PlanInputError("give either --gpus or --domains (full NVLink domains), not both"
                             if gpus is not None else "give --gpus or --domains (full NVLink domains)")
    if domains is not None:
        gpus = _whole(domains, "--domains") * size * per_tray
    gpus = _whole(gpus, "--gpus")
    if gpus % per_tray:
        low, high = gpus // per_tray * per_tray, (gpus // per_tray + 1) * per_tray
        alt = f"{high} or {low}" if low else f"{high}"
        raise PlanInputError(
            f"--gpus {gpus} is not a multiple of the {per_tray} GPUs of a {prof.name} compute tray: "
            f"use {alt} GPUs"
        )
    trays = gpus // per_tray
    n = math.ceil(trays / size)
    last = trays - (n - 1) * size
    names = domain_names(n)
    trays_of = [size if i < n - 1 else last for i in range(n)]
    # a domain takes the racks its trays fill (36x2: a domain of 9 trays or fewer is one NVL36 rack)
    racks_of = [math.ceil(t / cfg.trays_per_rack) for t in trays_of]
    return NVLinkPlan(
        profile=profile_name or prof.name,
        platform=str(prof.platform),
        configuration=cfg.name,
        gpus=gpus,
        gpus_per_tray=per_tray,
        hcas_per_tray=prof.hca.count,
        nvlink=prof.gpu.nvlink,
        trays=trays,
        domain_size=size,
        max_domain_size=most,
        domains=n,
        full_domains=n if last == size else n - 1,
        last_domain_trays=last,
        racks=sum(racks_of),
        switch_trays_per_domain=math.ceil(size / cfg.trays_per_rack) * cfg.switch_trays_per_rack,
        switch_trays=sum(racks_of) * cfg.switch_trays_per_rack,
        domain_trays=dict(zip(names, trays_of, strict=True)),
        doc=cfg.doc,
        source=cfg.source,
    )


def scale_out_switch(prof: Profile, name: str | None) -> catalog.Switch:
    """The compute-network switch for the trays' HCAs: ``name`` when given (its ports must run the
    HCAs' link layer and speed), else the first catalogue switch that does."""
    layer, speed = prof.hca.link_layer, prof.hca.speed
    if name:
        sw = catalog.switch(name)
        if (sw.link_layer, sw.speed) != (layer, speed):
            fits = [s.model for s in catalog.SWITCHES.values() if (s.link_layer, s.speed) == (layer, speed)]
            raise PlanInputError(
                f"--switch {sw.model} has {sw.speed} {sw.link_layer} ports and {prof.name}'s HCAs run "
                f"{speed} {layer}: use {' or '.join(fits) or 'a switch of that speed'}"
            )
        return sw
    for sw in catalog.SWITCHES.values():
        if (sw.link_layer, sw.speed) == (layer, speed):
            return sw
    raise PlanInputError(
        f"the switch catalogue has no {speed} {layer} switch for {prof.name}'s HCAs: name one with --switch"
    )
