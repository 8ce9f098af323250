"""The fabric model: link rates, NVLink, hardware profiles and thresholds, busbw, schedules.

Every number lives once, as data with its public source, under ``fabricops/model/data/``:

- :mod:`fabricops.model.rates` -- InfiniBand generations and widths, Ethernet speeds, sysfs rate strings
- :mod:`fabricops.model.nvlink` -- NVLink generations (``NVLINK[4]``)
- :mod:`fabricops.model.profiles` -- hardware profiles and ``threshold_for``
- :mod:`fabricops.model.collectives` -- NCCL busbw factors, algbw/busbw
- :mod:`fabricops.model.comm` -- communication volume per training step
- :mod:`fabricops.model.schedule` -- pairwise test rounds (circle method), per-rail pairs

See docs/model.md.
"""
