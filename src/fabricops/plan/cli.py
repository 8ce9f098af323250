"""``fabricops plan``: from a training job and a GPU count to a fabric design (docs/plan.md).

Exit status: 0 the plan was made (and written); 2 bad input (one sentence says what to fix).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fabricops.plan import writers
from fabricops.plan.catalog import SWITCHES, PlanInputError
from fabricops.plan.recommend import BUDGETS, Plan, make_plan

__all__ = ["register", "render_table", "run"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan",
        help="size a training fabric for N GPUs and write its inventory and a lab slice",
        description="From a training job and a GPU count to a fabric design, a cabling plan and a lab "
        "slice to rehearse it (docs/plan.md).",
    )
    p.add_argument("--gpus", type=int, required=True, help="number of GPUs")
    p.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per server (default 8)")
    p.add_argument(
        "--rails", type=int, default=None, help="NIC ports per node into the fabric (default: one per GPU)"
    )
    p.add_argument("--model-params", type=float, default=7e9, help="model parameters (default 7e9)")
    p.add_argument(
        "--precision", default="bf16", help="gradient precision: fp32, bf16, fp16, fp8 (default bf16)"
    )
    p.add_argument("--step-time", type=float, default=1.0, help="training step time in seconds (default 1.0)")
    p.add_argument(
        "--comm-share", type=float, default=0.5, help="share of the step communication may take (default 0.5)"
    )
    p.add_argument(
        "--strategy", choices=("dp", "sharded"), default="dp", help="dp all-reduce or sharded (ZeRO-3/FSDP)"
    )
    p.add_argument("--pipeline-stages", type=int, default=1, help="pipeline-parallel stages (default 1)")
    p.add_argument("--micro-batch", type=int, default=None, help="micro-batch size (pipeline activations)")
    p.add_argument("--seq-len", type=int, default=None, help="sequence length (pipeline activations)")
    p.add_argument("--hidden", type=int, default=None, help="hidden size (pipeline activations)")
    p.add_argument("--micro-batches", type=int, default=None, help="micro-batches per step (default: stages)")
    p.add_argument("--switch", default=None, help=f"switch model: {', '.join(SWITCHES)}")
    p.add_argument("--budget", choices=BUDGETS, default="high", help="budget (default high)")
    p.add_argument("--cloud", action="store_true", help="the cluster runs in a cloud provider's fabric")
    p.add_argument(
        "--oversubscription", type=float, default=1.0, help="leaf down:up ratio (default 1 = non-blocking)"
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
    d, c, r = plan.design, plan.comm, plan.recommendation
    rows: list[tuple[str, str]] = [
        ("GPUs", f"{d.gpus} ({d.nodes} node(s) x {d.gpus_per_node})"),
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
        if plan.hardware_profile:
            rows.append(("hardware profile", plan.hardware_profile))
    else:
        rows.append(("topology", "none: NVLink/NVSwitch inside the node"))
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
        )
    except PlanInputError as exc:
        print(f"fabricops plan: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(render_table(plan))
    if args.json:
        text = json.dumps(plan.to_dict(), indent=2) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
        else:
            with open(args.json, "w", encoding="utf-8") as fh:
                fh.write(text)
    if args.write_inventory:
        paths = writers.write(plan, args.write_inventory)
        for p in paths:
            print(f"wrote {p}")
    return 0
