"""``fabricops plan``: from a training job and a GPU count to a fabric design (docs/plan.md).

Exit status (docs/cli.md): 0 the plan was made (and written); 2 usage error: a flag value that is
not a finite number or that no plan can be made for (zero or fewer parameters, micro-batches, ...;
more than :data:`MAX_MODEL_PARAMS` parameters; an empty --json name: one sentence says what to
fix); 4 a --json or --write-inventory destination that cannot be written. With ``--json -``
stdout carries only the JSON (the table is not printed).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from fabricops.errors import CouldNotRun, UsageError
from fabricops.plan import writers
from fabricops.plan.catalog import SWITCHES, PlanInputError
from fabricops.plan.recommend import BUDGETS, Plan, make_plan

__all__ = ["register", "render_table", "run"]


#: 10^15 parameters, some 500 times the largest model trained so far: more is a typo, not a plan
MAX_MODEL_PARAMS = 1e15
#: the most a count flag (micro-batches, sequence length, hidden size, stages) may be
MAX_COUNT = 10**9


def finite(text: str) -> float:
    """A float flag: nan, inf and values that overflow to inf are usage errors, not tracebacks."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def model_params(text: str) -> float:
    """--model-params: a finite number from 1 to MAX_MODEL_PARAMS (0 or 1e-308 is no model)."""
    value = finite(text)
    if not 1 <= value <= MAX_MODEL_PARAMS:
        raise argparse.ArgumentTypeError(
            f"{text} parameters would give no plan: give a number from 1 to {MAX_MODEL_PARAMS:.0e} (e.g. 7e9)"
        )
    return value


def count(text: str) -> int:
    """A count flag: a whole number from 1 to MAX_COUNT (0 would be silently replaced by a default)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{text} is not a positive whole number (1 to {MAX_COUNT:,})")
    return value


def _non_finite(data: Any, path: str = "") -> str | None:
    """The first key whose value is nan or infinite (JSON cannot carry them; a plan must not)."""
    if isinstance(data, float) and not math.isfinite(data):
        return path or "value"
    if isinstance(data, dict):
        for k, v in data.items():
            found = _non_finite(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    if isinstance(data, list | tuple):
        for i, v in enumerate(data):
            found = _non_finite(v, f"{path}[{i}]")
            if found:
                return found
    return None


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan",
        help="size a training fabric for N GPUs and write its inventory and a lab slice",
        description="From a training job and a GPU count to a fabric design, a cabling plan and a lab "
        "slice to rehearse it (docs/plan.md).",
    )
    p.add_argument("--gpus", type=int, default=None, help="number of GPUs (required unless --domains)")
    p.add_argument(
        "--gpus-per-node", type=int, default=None, help="GPUs per server (default 8; --profile: its own)"
    )
    p.add_argument(
        "--rails",
        type=int,
        default=None,
        help="NIC ports per node into the fabric (default: one per GPU; --profile: one per HCA)",
    )
    p.add_argument(
        "--profile",
        metavar="PROFILE",
        default=None,
        help="hardware profile of multi-node NVLink compute trays (gb200-nvl72, gb300-nvl72, or a profile "
        "file): plan NVLink domains and a scale-out rail per HCA",
    )
    p.add_argument(
        "--domain-size",
        type=count,
        metavar="TRAYS",
        default=None,
        help="compute trays per NVLink domain, 1 to the profile's nvlink_domain.max_nodes (default: 18)",
    )
    p.add_argument(
        "--domains", type=count, metavar="N", default=None, help="N full NVLink domains instead of --gpus"
    )
    p.add_argument(
        "--nvl-config",
        choices=("72x1", "36x2"),
        default=None,
        help="NVL72 rack configuration: 72x1 one rack per domain (default), 36x2 two racks (GB200 only)",
    )
    p.add_argument("--model-params", type=model_params, default=7e9, help="model parameters (default 7e9)")
    p.add_argument(
        "--precision", default="bf16", help="gradient precision: fp32, bf16, fp16, fp8 (default bf16)"
    )
    p.add_argument("--step-time", type=finite, default=1.0, help="training step time in seconds (default 1)")
    p.add_argument(
        "--comm-share", type=finite, default=0.5, help="share of the step communication may take (default .5)"
    )
    p.add_argument(
        "--strategy", choices=("dp", "sharded"), default="dp", help="dp all-reduce or sharded (ZeRO-3/FSDP)"
    )
    p.add_argument("--pipeline-stages", type=count, default=1, help="pipeline-parallel stages (default 1)")
    p.add_argument("--micro-batch", type=count, default=None, help="micro-batch size (pipeline activations)")
    p.add_argument("--seq-len", type=count, default=None, help="sequence length (pipeline activations)")
    p.add_argument("--hidden", type=count, default=None, help="hidden size (pipeline activations)")
    p.add_argument(
        "--micro-batches", type=count, default=None, help="micro-batches per step (default: stages)"
    )
    p.add_argument("--switch", default=None, help=f"switch model: {', '.join(SWITCHES)}")
    p.add_argument("--budget", choices=BUDGETS, default="high", help="budget (default high)")
    p.add_argument("--cloud", action="store_true", help="the cluster runs in a cloud provider's fabric")
    p.add_argument(
        "--oversubscription", type=finite, default=1.0, help="leaf down:up ratio (default 1 = non-blocking)"
    )
    p.add_argument("--json", metavar="FILE", default=None, help="write the plan as JSON ('-' for stdout)")
    p.add_argument(
        "--write-inventory",
        metavar="DIR",
        default=None,
        help="write an inventory skeleton and DIR/lab-topology.yml",
    )
    p.set_defaults(func=run)


def _rule(row: dict[str, Any]) -> str:
    if row["max_gpus"] is None:
        return f"{row['topology']} (beyond the table's largest row)"
    return f"{row['topology']} (up to {row['max_gpus']} GPUs)"


def _gb(x: float) -> str:
    return f"{x / 1e9:,.2f} GB"


def render_table(plan: Plan) -> str:
    d, c, r, n = plan.design, plan.comm, plan.recommendation, plan.nvlink
    rows: list[tuple[str, str]] = [("GPUs", f"{d.gpus} ({d.nodes} node(s) x {d.gpus_per_node})")]
    if n is not None:
        rows = [
            ("GPUs", f"{n.gpus} ({n.trays} compute tray(s) x {n.gpus_per_tray})"),
            ("hardware profile", f"{n.profile} ({n.configuration}, {n.hcas_per_tray} HCAs per tray)"),
            (
                "NVLink domains",
                f"{n.domains} of up to {n.domain_size} trays ({n.domain_size * n.gpus_per_tray} GPUs)"
                + (f"; the last has {n.last_domain_trays} tray(s)" if n.partial else ""),
            ),
            ("domain trays", ", ".join(f"{k} {v}" for k, v in n.domain_trays.items())
             if n.domains <= 8 else f"{next(iter(n.domain_trays))} .. {list(n.domain_trays)[-1]}"),
            ("racks", f"{n.racks}"),
            (
                "NVLink switch",
                f"{n.switch_trays_per_domain} switch trays per domain, {n.switch_trays} in all ({n.doc})",
            ),
        ]
    rows += [
        ("scenario", r.scenario),
        ("interconnect", r.interconnect),
        ("why", r.reason),
    ]
    if d.nodes > 1 and plan.switch is not None:
        sw = plan.switch
        rows += [
            ("switch", f"{sw.name}: {sw.ports} x {sw.speed} ({sw.port_rate_gbps:g} Gb/s per port)"),
            ("rule of thumb", _rule(plan.rule_of_thumb)),
            (
                "topology",
                f"{d.topology}, {d.tiers} tier(s), up to {d.max_end_ports:,} end ports with radix {d.radix}",
            ),
            (
                "rails",
                f"{d.rails} per node, "
                + ("rail-optimised (one leaf group per rail)" if d.rail_optimised else "single rail"),
            ),
            ("end ports", f"{d.end_ports:,}"),
            (
                "switches",
                ", ".join(f"{k} {v:,}" for k, v in d.switches.items()) + f" (total {d.total_switches:,})",
            ),
            ("cables", ", ".join(f"{k} {v:,}" for k, v in d.cables.items()) + f" (total {d.total_cables:,})"),
            ("oversubscription", f"{d.oversubscription:g}:1"),
            ("bisection", f"{d.bisection_gbps / 1000:,.1f} Tb/s per direction"),
        ]
        if plan.hardware_profile and n is None:
            rows.append(("hardware profile", plan.hardware_profile))
    elif n is None:
        rows.append(("topology", "none: NVLink/NVSwitch inside the node"))
    else:
        rows.append(("topology", "none: one compute tray, no scale-out fabric"))
    rows += [
        ("traffic", f"{c.strategy}, {c.ranks} rank(s), {c.pipeline_stages} pipeline stage(s), {c.precision}"),
        ("gradients", f"{_gb(c.gradient_bytes)} per rank per step"),
        (
            "bytes per rank",
            f"{_gb(c.bytes_per_rank)} per step"
            + (
                f" ({_gb(c.pipeline_bytes_per_rank)} pipeline activations)"
                if c.pipeline_bytes_per_rank
                else ""
            ),
        ),
        ("busbw per GPU", f"{c.busbw_gbs:,.1f} GB/s ({c.busbw_basis})"),
        ("comm time", f"{c.comm_time_s:.3f} s per step"),
        (
            "busbw needed",
            f"{c.required_busbw_gbs:,.1f} GB/s for {c.comm_share:.0%} of a {c.step_time_s:g} s step"
            + (" - fits" if c.fits else " - does NOT fit"),
        ),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    lines += [f"note{' ' * (width - 4)}  {n}" for n in plan.notes]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    if args.gpus is None and args.domains is None:
        raise UsageError("the following arguments are required: --gpus (or --domains with --profile)")
    if args.json is not None and not args.json.strip():
        raise UsageError("--json was given an empty file name; give a file, or - for stdout")
    try:
        plan = make_plan(
            args.gpus,
            gpus_per_node=args.gpus_per_node,
            model_params=args.model_params,
            precision=args.precision,
            step_time=args.step_time,
            switch=args.switch,
            budget=args.budget,
            cloud=args.cloud,
            rails=args.rails,
            oversubscription=args.oversubscription,
            comm_share=args.comm_share,
            strategy=args.strategy,
            pipeline_stages=args.pipeline_stages,
            micro_batch=args.micro_batch,
            seq_len=args.seq_len,
            hidden=args.hidden,
            micro_batches=args.micro_batches,
            profile=args.profile,
            domain_size=args.domain_size,
            domains=args.domains,
            nvl_config=args.nvl_config,
        )
    except PlanInputError as exc:
        raise UsageError(str(exc)) from None
    except (OverflowError, ValueError, ZeroDivisionError) as exc:
        raise UsageError(f"these values give no plan ({exc}); use realistic sizes "
                         "(e.g. --model-params 7e9, --step-time 1)") from None
    data = plan.to_dict()
    bad = _non_finite(data)
    if bad:
        raise UsageError(f"these values give a plan whose {bad} is not a finite number; "
                         "use realistic sizes (e.g. --model-params 7e9, --step-time 1)")
    text = json.dumps(data, indent=2, allow_nan=False) + "\n"
    if args.json and args.json != "-":
        from fabricops.cliopts import check_writable, write_output

        check_writable(args.json, "--json")
        write_output(args.json, text, "--json")
    if args.json == "-":
        sys.stdout.write(text)  # stdout carries only the JSON
    else:
        sys.stdout.write(render_table(plan))
    if args.write_inventory:
        try:
            paths = writers.write(plan, args.write_inventory)
        except OSError as exc:
            raise CouldNotRun(f"--write-inventory {args.write_inventory}: cannot write "
                              f"({exc.strerror or exc}: {exc.filename or ''})") from None
        for p in paths:
            print(f"wrote {p}", file=sys.stderr if args.json == "-" else sys.stdout)
    return 0
