"""``chatledger stress`` and ``chatledger bench``: load from many processes, and the
benchmark (:mod:`chatledger.tools.bench`)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from ...dsn import DSN_ENV, display, resolve_dsn
from .shared import Command, dsn_hint, mask_password, say


def _configure_stress(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dsn",
        action="append",
        help=f"database URL, repeatable: one report per database; default: ${DSN_ENV}, else the embedded one",
    )
    parser.add_argument("--processes", type=int, default=8, metavar="N", help="worker processes (default: 8)")
    parser.add_argument(
        "--appends", type=int, default=200, metavar="N", help="appends per worker and session (default: 200)"
    )
    parser.add_argument("--shared-only", action="store_true", help="skip each worker's own session")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="the --dsn values are the nodes of one cluster (Galera): spread the workers over them, "
        "read each append back through another node, compare the nodes; one report",
    )


async def _stress(args: argparse.Namespace, console: Console) -> int:
    from rich.table import Table

    from ..stress import run_stress

    if args.processes < 1 or args.appends < 1:
        raise ValueError("--processes and --appends must be at least 1")
    if args.cluster and len(args.dsn or []) < 2:
        raise ValueError("--cluster needs the DSN of every node: --dsn NODE1 --dsn NODE2 ...")
    table = Table(title=f"stress: {args.processes} processes x {args.appends} appends")
    for column in ("backend", "appends/s", "acknowledged", "errors", "retries", "gaps", "duplicates", "lost"):
        table.add_column(column, justify="right", min_width=len(column), no_wrap=True)
    cluster = Table(title="the cluster's nodes: causal reads (through the next node) and agreement")
    for column in ("nodes", "causal reads", "causal misses", "errors per node", "disagreeing", "unreachable"):
        cluster.add_column(column, justify="right", min_width=len(column), no_wrap=True)
    clean = True
    left: list[str] = []
    targets: list[Any] = [args.dsn] if args.cluster else (args.dsn or [None])
    for dsn in targets:
        nodes = [resolve_dsn(node) for node in dsn] if args.cluster else [resolve_dsn(dsn)]
        say(console, f"stressing {', '.join(display(url) for url in nodes)} ...")
        report = await run_stress(
            nodes if args.cluster else nodes[0],
            processes=args.processes,
            appends=args.appends,
            own_sessions=not args.shared_only,
        )
        clean = clean and report.clean
        counts = (
            report.acknowledged,
            report.errors,
            report.retries,
            report.gaps,
            report.duplicates,
            report.lost,
        )
        table.add_row(report.backend, f"{report.appends_per_second:.0f}", *(str(count) for count in counts))
        cluster.add_row(
            str(report.nodes),
            str(report.causal_reads),
            str(report.causal_misses),
            "/".join(str(count) for count in report.node_errors),
            str(report.disagreeing_nodes),
            str(report.unreachable_nodes),
        )
        for sample in report.error_samples:
            for node in dsn if args.cluster else [dsn]:
                sample = mask_password(sample, node)
            say(console, f"error: {sample}")
        sessions = report.processes + 1 if not args.shared_only else 1
        first = dsn[0] if args.cluster else dsn
        target = f" --dsn {dsn_hint(first)}" if first else ""
        left.append(
            f"{sessions} sessions {report.session_prefix}* left in {display(nodes[0])}; remove them with: "
            f"chatledger sessions purge --prefix {report.session_prefix}{target}"
        )
    console.print(table)
    if args.cluster:
        console.print(cluster)
    for line in left:
        say(console, line)
    return 0 if clean else 1


def _configure_bench(parser: argparse.ArgumentParser) -> None:
    from ..bench import configure

    configure(parser)


async def _bench(args: argparse.Namespace, console: Console) -> int:
    from ..bench import run_command

    return await run_command(args, console)


#: This group's commands, in the order ``--help`` lists them.
COMMANDS: tuple[Command, ...] = (
    Command(
        "stress",
        "append from many processes at once; report throughput, errors, retries, gaps and duplicates "
        "(exit 1 unless all are clean)",
        _configure_stress,
        _stress,
    ),
    Command(
        "bench",
        "benchmark chatledger against zett-agent's SQL store, a bare INSERT and the OpenAI Agents "
        "SDK's and ADK's own stores (needs the dev extra)",
        _configure_bench,
        _bench,
    ),
)
