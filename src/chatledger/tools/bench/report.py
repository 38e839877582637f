"""The benchmark's report: the targets judged, and the tables printed."""

from __future__ import annotations

from collections.abc import Callable

from rich.table import Table as RichTable

from ... import dialects
from .load import breakdown
from .results import (
    CONTENDERS,
    STORES,
    AppendStats,
    BackendReport,
    BenchReport,
    Frameworks,
    ReplicaLoads,
    Sizes,
    Verdict,
)
from .seen import HOT, LEDGER, MIX, NAIVE, OWN, TUNED, Seen, SeenRun, SeenStats

#: The contenders of the append measurement, in table order.


def targets(report: BackendReport, sizes: Sizes) -> list[Verdict]:
    """The benchmark's targets, as ratios of this backend's medians."""
    append = report.append
    load = report.load["chatledger"]
    largest_load, largest_list = str(max(sizes.load_messages)), str(max(sizes.list_sessions))
    lists = report.list_sessions
    return [
        Verdict(
            "append_vs_floor",
            "append throughput, chatledger / floor",
            append["chatledger"].per_second / append["floor"].per_second,
            ">=",
            0.7,
            reason=append_breakdown(append),
        ),
        Verdict(
            "append_vs_zett",
            "append throughput, chatledger / zett",
            append["chatledger"].per_second / append["zett"].per_second,
            ">=",
            2.0,
        ),
        Verdict(
            "load_o_tail",
            f"chatledger load, {largest_load}-message session / {sizes.tail}-message session",
            load[largest_load].median_ms / load[str(sizes.tail)].median_ms,
            "<=",
            2.0,
        ),
        Verdict(
            "list_o_page",
            f"list_sessions over {largest_list} sessions, zett time / chatledger time",
            lists["zett"][largest_list].median_ms / lists["chatledger"][largest_list].median_ms,
            ">=",
            100.0,
        ),
        *agent_load_targets(report, sizes),
        *_transfer_targets(report),
    ]


def append_breakdown(append: dict[str, AppendStats]) -> str:
    """Where chatledger's append and the floor's went, measured (their
    :class:`AppendBreakdown`); empty when either was not instrumented."""
    parts = []
    for name in ("chatledger", "floor"):
        stats = append[name].breakdown
        if stats is None:
            return ""
        parts.append(
            f"{name} {stats.wall_ms:.2f} ms: {stats.cpu_ms:.2f} ms CPU of the event loop's thread, "
            f"{stats.waiting_ms:.2f} ms off it; {stats.statements:g} statements"
            + (
                ""
                if stats.round_trips is None
                else f", {stats.round_trips:g} {'thread hops' if stats.hops else 'round trips'}"
            )
            + f", {stats.driver_ms:.2f} ms in the driver"
        )
    return "per append, p50s of an instrumented round: " + "; ".join(parts)


def _transfer_targets(report: BackendReport) -> list[Verdict]:
    if report.transfer is None or not dialects.backend(report.backend).server:
        return []
    return [
        Verdict(
            "import_vs_floor",
            "import throughput, chatledger import / bare bulk insert",
            report.transfer.import_per_second / report.transfer.floor_per_second,
            ">=",
            0.5,
        )
    ]


def _transfer_rows(report: BackendReport, verdicts: dict[str, Verdict]) -> list[tuple[str, ...]]:
    stats = report.transfer
    if stats is None:
        return []
    ratio = stats.import_per_second / stats.floor_per_second
    verdict = verdicts.get("import_vs_floor")
    cells = (
        (
            f"cl/floor {verdict.value:.2f}",
            f"{verdict.op} {verdict.bound:g}",
            "PASS" if verdict.met else "MISS",
        )
        if verdict is not None
        else (f"cl/floor {ratio:.2f}", "", "")
    )
    size = f"{stats.messages:,} messages"
    return [
        (f"export, {size}, /s", _num(stats.export_per_second), "", "", "", "", ""),
        (f"import, {size}, /s", _num(stats.import_per_second), "", _num(stats.floor_per_second), *cells),
        (
            f"peak memory, MiB: export / import (idle {stats.baseline_peak_mib:.0f})",
            f"{stats.export_peak_mib:.0f} / {stats.import_peak_mib:.0f}",
            "",
            "",
            "",
            "",
            "",
        ),
    ]


#: Bounds of the agent loads: a reload at most 1.5x a bare read of the same rows at
#: every size, the first load of the largest at most 4x.
WARM_LOAD_BOUND, COLD_LOAD_BOUND = 1.5, 4.0


def agent_load_targets(report: BackendReport, sizes: Sizes) -> list[Verdict]:
    """Warm load / floor at every size of ``sizes.agent_loads``, cold load / floor at
    the largest; p50s, each with its measured breakdown."""
    verdicts = []
    largest = max(sizes.agent_loads)
    for count in sizes.agent_loads:
        stats = report.agent_load[str(count)]
        for kind, bound in (("warm", WARM_LOAD_BOUND), ("cold", COLD_LOAD_BOUND)):
            if kind == "cold" and count != largest:
                continue
            verdicts.append(
                Verdict(
                    f"{kind}_load_{count}",
                    f"{kind} load p50 / floor p50, {count}-message session",
                    stats[kind].median_ms / stats[f"{kind} floor"].median_ms,
                    "<=",
                    bound,
                    reason=breakdown(stats, kind),
                )
            )
    return verdicts


# -- output ---------------------------------------------------------------------------


def _num(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


#: Columns of the result table; the last holds PASS / MISS.
COLUMNS = ("measure", "chatledger", "zett", "floor", "ratio", "target", "met")


def table_rows(report: BackendReport, sizes: Sizes) -> list[tuple[str, ...]]:
    """One backend's medians, ratios and target verdicts, as rows of :data:`COLUMNS`."""
    verdicts = {verdict.name: verdict for verdict in report.targets}

    def verdict_cells(name: str, ratio: str) -> tuple[str, str, str]:
        verdict = verdicts[name]
        return (
            f"{ratio}{verdict.value:.2f}",
            f"{verdict.op} {verdict.bound:g}",
            "PASS" if verdict.met else "MISS",
        )

    rows: list[tuple[str, ...]] = []
    append = report.append
    rows.append(("append p50 latency, ms", *(f"{append[n].median_ms:.2f}" for n in CONTENDERS), "", "", ""))
    rows.append(("append p95 latency, ms", *(f"{append[n].p95_ms:.2f}" for n in CONTENDERS), "", "", ""))
    rows.append(
        (
            "append throughput, /s",
            *(_num(append[name].per_second) for name in CONTENDERS),
            *verdict_cells("append_vs_floor", "cl/floor "),
        )
    )
    rows.append(("", "", "", "", *verdict_cells("append_vs_zett", "cl/zett ")))
    for name, stats in append.items():
        if name.startswith("chatledger, "):  # the variant: the price of the default's setting
            label = name.removeprefix("chatledger, ")
            ratio = append["chatledger"].per_second / stats.per_second
            rows.append((f"append p50 latency, ms, {label}", f"{stats.median_ms:.2f}", "", "", "", "", ""))
            rows.append(
                (
                    f"append throughput, /s, {label}",
                    _num(stats.per_second),
                    "",
                    "",
                    f"default/{label} {ratio:.2f}",
                    "",
                    "",
                )
            )
    load = report.load
    small = str(sizes.tail)
    rows.append(
        (
            f"load, {small}-message session, ms",
            *(f"{load[k][small].median_ms:.2f}" for k in STORES),
            "",
            "",
            "",
            "",
        )
    )
    for count in sizes.load_messages:
        label = str(count)
        if count == max(sizes.load_messages):
            cells = verdict_cells("load_o_tail", f"/{small}: ")
        else:
            ratio = load["chatledger"][label].median_ms / load["chatledger"][small].median_ms
            cells = (f"/{small}: {ratio:.2f}", "", "")
        rows.append(
            (
                f"load, checkpoint + {sizes.tail} of {count:,}, ms",
                *(f"{load[k][label].median_ms:.2f}" for k in STORES),
                "",
                *cells,
            )
        )
    for name, by_size in load.items():
        if name.startswith("chatledger, "):  # the variant (the servers: with pre-ping)
            label, largest = name.removeprefix("chatledger, "), str(max(sizes.load_messages))
            ratio = load["chatledger"][largest].median_ms / by_size[largest].median_ms
            rows.append(
                (
                    f"load, checkpoint + {sizes.tail} of {int(largest):,}, ms, {label}",
                    f"{by_size[largest].median_ms:.2f}",
                    "",
                    "",
                    f"default/{label} {ratio:.2f}",
                    "",
                    "",
                )
            )
    rows += agent_load_rows(report, sizes, verdict_cells)
    lists = report.list_sessions
    for count in sizes.list_sessions:
        label = str(count)
        if count == max(sizes.list_sessions):
            cells = verdict_cells("list_o_page", "zett/cl ")
        else:
            ratio = lists["zett"][label].median_ms / lists["chatledger"][label].median_ms
            cells = (f"zett/cl {ratio:.1f}", "", "")
        rows.append(
            (
                f"list_sessions {sizes.page} of {count:,}, ms",
                *(f"{lists[k][label].median_ms:.2f}" for k in STORES),
                "",
                *cells,
            )
        )
    for mode in ("one session", "own sessions"):
        runs = {kind: report.concurrent.get(kind, {}).get(mode) for kind in STORES}
        if not any(runs.values()):
            continue
        processes = next(run.processes for run in runs.values() if run is not None)
        sessions = "1 session" if mode == "one session" else f"{processes} sessions"
        rows.append(
            (
                f"{processes} processes -> {sessions}, /s (errors)",
                *(
                    f"{_num(run.per_second)} ({run.errors})" if run is not None else "-"
                    for run in runs.values()
                ),
                "",
                "",
                "",
                "",
            )
        )
    rows += _transfer_rows(report, verdicts)
    return rows


def agent_load_rows(
    report: BackendReport, sizes: Sizes, verdict_cells: Callable[[str, str], tuple[str, str, str]]
) -> list[tuple[str, ...]]:
    """The agent loads' rows: p50 / p95 of chatledger and of the floor, the p50 ratio."""
    rows: list[tuple[str, ...]] = []
    verdicts = {verdict.name for verdict in report.targets}
    for count in sizes.agent_loads:
        stats = report.agent_load[str(count)]
        for kind in ("cold", "warm"):
            ours, floor = stats[kind], stats[f"{kind} floor"]
            name = f"{kind}_load_{count}"
            if name in verdicts:
                cells = verdict_cells(name, "cl/floor ")
            else:
                cells = (f"cl/floor {ours.median_ms / floor.median_ms:.2f}", "", "")
            what = f"{count:,}" if kind == "cold" else f"{count:,}+{sizes.agent_appends}"
            rows.append(
                (
                    f"load {kind} {what}, p50 / p95 ms",
                    f"{ours.median_ms:.2f} / {ours.p95_ms:.2f}",
                    "",
                    f"{floor.median_ms:.2f} / {floor.p95_ms:.2f}",
                    *cells,
                )
            )
    return rows


def missed_reasons(report: BackendReport) -> list[str]:
    """One line per missed target that carries a measured reason."""
    return [
        f"{verdict.name} missed: {verdict.reason}"
        for verdict in report.targets
        if not verdict.met and verdict.reason
    ]


def _title(report: BackendReport) -> str:
    return f"{report.backend}: {report.server_version.split(' on ')[0]}"


def _rich(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> RichTable:
    table = RichTable(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, justify="left" if column in ("measure", "target", "store") else "right")
    marks = {"PASS": "[green]PASS[/green]", "MISS": "[red]MISS[/red]"}
    for row in rows:
        table.add_row(*row[:-1], marks.get(row[-1], row[-1]))
    return table


def _markdown_table(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |"]
    lines.append(
        "|" + "|".join(":--" if c in ("measure", "target", "store") else "--:" for c in columns) + "|"
    )
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def render(report: BackendReport, sizes: Sizes) -> RichTable:
    """One backend's :func:`table_rows` as a rich table."""
    return _rich(_title(report), COLUMNS, table_rows(report, sizes))


#: Columns of the frameworks' table: chatledger's adapter, the framework's own store.
FRAMEWORK_COLUMNS = ("measure", "chatledger", "own", "store", "cl/own")


def framework_rows(frameworks: Frameworks) -> list[tuple[str, ...]]:
    """Per framework and operation, calls per second of chatledger's adapter and of each
    of the framework's own stores, and their ratio (chatledger's alone where no own
    store was measured); then the concurrency round of each:
    acknowledged / refused / errors / lost / duplicated writes."""
    rows: list[tuple[str, ...]] = []
    for framework in dict.fromkeys(store.framework for store in frameworks.stores):
        stores = [store for store in frameworks.stores if store.framework == framework]
        ours = next(store for store in stores if store.ours)
        for label, stats in ours.timings.items():
            rate = 1000 / stats.median_ms
            owns = [store for store in stores if not store.ours and label in store.timings]
            for own in owns:
                theirs = 1000 / own.timings[label].median_ms
                rows.append(
                    (f"{framework} {label}, /s", _num(rate), _num(theirs), own.name, f"{rate / theirs:.2f}")
                )
            if not owns:  # no own store measured (its note says why): chatledger's rate alone
                rows.append((f"{framework} {label}, /s", _num(rate), "", "not measured", ""))
        for store in stores:
            run = store.concurrency
            if run is None:
                continue
            cells = f"{run.acknowledged} / {run.refused} / {run.errors} / {run.lost} / {run.duplicates}"
            rows.append(
                (
                    f"{framework}, {run.tasks} tasks x {run.attempted // run.tasks} writes, one session: "
                    "acked / refused / errors / lost / dup",
                    cells if store.ours else "",
                    "" if store.ours else cells,
                    store.name,
                    "",
                )
            )
    return rows


def framework_notes(frameworks: Frameworks) -> list[str]:
    """How a store was set up when that differs, why one was not measured, and the
    concurrency round's errors by kind."""
    lines = [f"frameworks: {frameworks.note}"] if frameworks.note else []
    for store in frameworks.stores:
        if store.note:
            lines.append(f"{store.framework} {store.name}: {store.note}")
        for error, count in (store.concurrency.error_kinds if store.concurrency else {}).items():
            lines.append(f"{store.framework} {store.name}, concurrent: {count} x {error}")
    return lines


def render_frameworks(report: BackendReport) -> RichTable:
    """The frameworks' table of one backend (:func:`framework_rows`)."""
    return _rich(f"{_title(report)}: frameworks", FRAMEWORK_COLUMNS, framework_rows(report.frameworks))


def markdown(report: BenchReport) -> str:
    """The whole run as Markdown: the machine, then one table per backend."""
    machine = report.machine
    lines = [
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB, "
        f"{machine['platform']}, Python {machine['python']}; load average "
        f"{machine['load_average_at_start'][0]:.1f} at the start, "
        f"{(machine.get('load_average_at_end') or [0.0])[0]:.1f} at the end.",
    ]
    for backend in report.backends:
        lines += ["", f"**{_title(backend)}**", ""]
        lines += _markdown_table(COLUMNS, table_rows(backend, report.sizes))
        lines += seen_markdown(backend)
        reasons = missed_reasons(backend)
        if reasons:
            lines += ["", *(f"- {line}" for line in reasons)]
        lines += ["", *render_replica_loads(backend.replicas)]
        frameworks = framework_rows(backend.frameworks)
        if frameworks:
            lines += [
                "",
                f"**{_title(backend)}: frameworks**",
                "",
                *_markdown_table(FRAMEWORK_COLUMNS, frameworks),
            ]
        notes = framework_notes(backend.frameworks)
        if notes:
            lines += ["", *(f"- {line}" for line in notes)]
    return "\n".join(lines) + "\n"


def render_replica_loads(loads: ReplicaLoads) -> list[str]:
    """The runs as lines of text, for the console and Markdown."""
    if not loads.runs:
        return [f"load throughput on read replicas: {loads.note}"]
    lines = ["load throughput on read replicas (50-message session, no load cache):"]
    base = loads.runs[0].per_second
    for run in loads.runs:
        ratio = f", x{run.per_second / base:.2f}" if base and run.replicas else ""
        lines.append(
            f"  {run.replicas} replica{'s' if run.replicas != 1 else ''}: {run.per_second:,.0f} loads/s "
            f"({run.processes} processes, {run.loads} loads, {run.served} on replicas{ratio})"
        )
    return lines


# -- appends as users see them (:mod:`.seen`) -------------------------------------------

#: The targets of the appends as users see them: chatledger / the naive floor's
#: throughput at every size, and at 8 to 64 tasks; a hot session's throughput at
#: :data:`SEEN_HOT_TASKS` tasks / as many sessions'; p99 latency / the floor's there.
SEEN_SIZE_BOUND, SEEN_TASKS_BOUND, SEEN_HOT_BOUND, SEEN_P99_BOUND = 1.0, 0.9, 0.8, 1.5
SEEN_TASKS_JUDGED = range(8, 65)
SEEN_HOT_TASKS = 32


def _size_label(run: SeenRun) -> str:
    if run.label == MIX:
        return f"mix (mean {run.content_bytes / 1000:.1f} KB)"
    size = int(run.label)
    return f"{size // 1000} KB" if size >= 1000 else f"{size} B"


def seen_targets(seen: Seen) -> list[Verdict]:
    """The appends' targets, judged on the runs measured (a task count not run, none)."""
    verdicts = [
        Verdict(
            f"seen_size_{run.label}",
            f"append throughput / naive floor's, one task, {_size_label(run)}",
            run.ratio(LEDGER, NAIVE),
            ">=",
            SEEN_SIZE_BOUND,
        )
        for run in seen.sizes
    ]
    for run in seen.tasks:
        tasks = int(run.label)
        for mode, short in ((OWN, "own"), (HOT, "hot")):
            ours, floor = f"{LEDGER}, {mode}", f"{NAIVE}, {mode}"
            if tasks in SEEN_TASKS_JUDGED:
                verdicts.append(
                    Verdict(
                        f"seen_tasks_{tasks}_{short}",
                        f"append throughput / naive floor's, {tasks} tasks, {mode}",
                        run.ratio(ours, floor),
                        ">=",
                        SEEN_TASKS_BOUND,
                    )
                )
            if tasks == SEEN_HOT_TASKS:
                stats = run.contenders
                verdicts.append(
                    Verdict(
                        f"seen_p99_{tasks}_{short}",
                        f"append p99 / naive floor's, {tasks} tasks, {mode}",
                        stats[ours].p99_ms / stats[floor].p99_ms,
                        "<=",
                        SEEN_P99_BOUND,
                    )
                )
        if tasks == SEEN_HOT_TASKS:
            verdicts.append(
                Verdict(
                    f"seen_hot_{tasks}",
                    f"chatledger throughput, {tasks} tasks, one session / own sessions",
                    run.ratio(f"{LEDGER}, {HOT}", f"{LEDGER}, {OWN}"),
                    ">=",
                    SEEN_HOT_BOUND,
                )
            )
    return verdicts


def _rate(stats: SeenStats) -> str:
    errors = f" ({stats.errors} errors)" if stats.errors else ""
    return f"{_num(stats.per_second)}{errors}"


def _latency(stats: SeenStats) -> str:
    return f"{stats.p50_ms:.2f} / {stats.p99_ms:.2f}"


def _cpu(stats: SeenStats) -> str:
    return f"{stats.cpu_ms:.2f} / {stats.wall_ms:.2f}"


#: Columns of the sizes table: the contenders, then chatledger over each floor.
SEEN_SIZE_COLUMNS = (
    "measure",
    "chatledger",
    "naive floor",
    "tuned floor",
    "cl/naive",
    "cl/tuned",
    "target",
    "met",
)
#: Columns of the tasks' and processes' table.
SEEN_LOAD_COLUMNS = ("measure", "chatledger", "naive floor", "cl/naive", "target", "met")


def _verdict_cells(verdicts: dict[str, Verdict], name: str) -> tuple[str, str]:
    verdict = verdicts.get(name)
    if verdict is None:
        return "", ""
    return f"{verdict.op} {verdict.bound:g}", "PASS" if verdict.met else "MISS"


def seen_size_rows(report: BackendReport) -> list[tuple[str, ...]]:
    """Per size: throughput, p50 / p99 latency, client CPU / wall time per append, of
    chatledger, the naive and the tuned floor, and chatledger's ratios to each."""
    verdicts = {verdict.name: verdict for verdict in report.seen_targets}
    rows: list[tuple[str, ...]] = []
    for run in report.seen.sizes:
        stats = run.contenders
        names = (LEDGER, NAIVE, TUNED)
        rows.append(
            (
                f"{_size_label(run)}, appends/s",
                *(_rate(stats[name]) for name in names),
                f"{run.ratio(LEDGER, NAIVE):.2f}",
                f"{run.ratio(LEDGER, TUNED):.2f}",
                *_verdict_cells(verdicts, f"seen_size_{run.label}"),
            )
        )
        rows.append(
            (
                "  p50 / p99 latency, ms",
                *(_latency(stats[name]) for name in names),
                f"p99 {stats[LEDGER].p99_ms / stats[NAIVE].p99_ms:.2f}",
                f"p99 {stats[LEDGER].p99_ms / stats[TUNED].p99_ms:.2f}",
                "",
                "",
            )
        )
        rows.append(
            (
                "  CPU / wall per append, ms",
                *(_cpu(stats[name]) for name in names),
                f"cpu {run.cpu_ratio(LEDGER, NAIVE):.2f}",
                f"cpu {run.cpu_ratio(LEDGER, TUNED):.2f}",
                "",
                "",
            )
        )
    return rows


def seen_load_rows(report: BackendReport) -> list[tuple[str, ...]]:
    """Per task count and process count, one session and own sessions: throughput,
    p50 / p99 latency and client CPU / wall per append, chatledger against the naive
    floor; and chatledger's one session / own sessions."""
    verdicts = {verdict.name: verdict for verdict in report.seen_targets}
    rows: list[tuple[str, ...]] = []
    for section, runs in (("tasks", report.seen.tasks), ("processes", report.seen.processes)):
        for run in runs:
            count = int(run.label)
            unit = section if count != 1 else section.removesuffix("s").removesuffix("e")
            for mode, short in ((OWN, "own"), (HOT, "hot")):
                ours, floor = run.contenders[f"{LEDGER}, {mode}"], run.contenders[f"{NAIVE}, {mode}"]
                judged = section == "tasks"
                rows.append(
                    (
                        f"{count} {unit}, {mode}, appends/s",
                        _rate(ours),
                        _rate(floor),
                        f"{run.ratio(f'{LEDGER}, {mode}', f'{NAIVE}, {mode}'):.2f}",
                        *(_verdict_cells(verdicts, f"seen_tasks_{count}_{short}") if judged else ("", "")),
                    )
                )
                rows.append(
                    (
                        "  p50 / p99 latency, ms",
                        _latency(ours),
                        _latency(floor),
                        f"p99 {ours.p99_ms / floor.p99_ms:.2f}",
                        *(_verdict_cells(verdicts, f"seen_p99_{count}_{short}") if judged else ("", "")),
                    )
                )
                rows.append(
                    (
                        "  CPU / wall per append, ms",
                        _cpu(ours),
                        _cpu(floor),
                        f"cpu {run.cpu_ratio(f'{LEDGER}, {mode}', f'{NAIVE}, {mode}'):.2f}",
                        "",
                        "",
                    )
                )
            hot = run.ratio(f"{LEDGER}, {HOT}", f"{LEDGER}, {OWN}")
            floor_hot = run.ratio(f"{NAIVE}, {HOT}", f"{NAIVE}, {OWN}")
            rows.append(
                (
                    f"{count} {unit}, one session / own sessions",
                    f"{hot:.2f}",
                    f"{floor_hot:.2f}",
                    "",
                    *(_verdict_cells(verdicts, f"seen_hot_{count}") if section == "tasks" else ("", "")),
                )
            )
    return rows


def render_seen(report: BackendReport) -> list[RichTable]:
    """The tables of the appends as users see them (none when not measured)."""
    tables = []
    if report.seen.sizes:
        tables.append(_rich(f"{_title(report)}: appends by size", SEEN_SIZE_COLUMNS, seen_size_rows(report)))
    if report.seen.tasks or report.seen.processes:
        tables.append(
            _rich(
                f"{_title(report)}: concurrent appends (the mix)", SEEN_LOAD_COLUMNS, seen_load_rows(report)
            )
        )
    return tables


def seen_markdown(report: BackendReport) -> list[str]:
    lines: list[str] = []
    if report.seen.sizes:
        lines += ["", f"**{_title(report)}: appends by size**", ""]
        lines += _markdown_table(SEEN_SIZE_COLUMNS, seen_size_rows(report))
    if report.seen.tasks or report.seen.processes:
        lines += ["", f"**{_title(report)}: concurrent appends (the mix)**", ""]
        lines += _markdown_table(SEEN_LOAD_COLUMNS, seen_load_rows(report))
    return lines
