"""``geofl ledger …``: audit queries over a run's governance ledgers (000 §3.5, §4.7).

Exit codes: 0 success; 1 ``verify`` found a mismatch (each named on stderr); 2 bad input.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from geofl.cli.common import RunDirArg, fail
from geofl.errors import GeoflError

__all__ = ["ledger_app"]

ledger_app = typer.Typer(no_args_is_help=True, help="Audit a run's governance ledger.")

MethodOpt = Annotated[str | None, typer.Option(help="Only this method.")]
SeedOpt = Annotated[int | None, typer.Option(help="Only this seed.")]
out = Console(width=None if sys.stdout.isatty() else 160)


@ledger_app.callback()
def _needs_governance() -> None:
    # Every ledger command opens the chain: on a core install, one line naming the extra.
    from geofl.errors import ConfigError
    from geofl.registry import require_extra

    try:
        require_extra("governance", "geofl ledger")
    except ConfigError as err:
        raise fail(str(err)) from None


def _ledgers(run_dir: Path, method: str | None, seed: int | None) -> Iterator[tuple[Any, Any]]:
    """Each governed run of ``run_dir`` with its ledger opened read-only (closed after)."""
    from geofl.governance.audit import find_ledgers, open_readonly

    for run in find_ledgers(run_dir, method, seed):
        ledger = open_readonly(run)
        try:
            yield run, ledger
        finally:
            ledger.close()


def _short(h: str) -> str:
    return h[:10] + "…" if len(h) > 12 else h


@ledger_app.command("show")
def show(
    run_dir: RunDirArg,
    method: MethodOpt = None,
    seed: SeedOpt = None,
    round_: Annotated[int | None, typer.Option("--round", help="Only this round.")] = None,
) -> None:
    """Per-round governance records (000 Table 2 layout), each checked against the chain.

    The records shown are the chain's; "Success" means that rounds.jsonl and
    governance.jsonl hold exactly what the chain records for the round, otherwise the
    column says what is missing or different.
    """
    from geofl.governance.audit import audit_records, read_chain

    try:
        for run, ledger in _ledgers(run_dir, method, seed):
            chain = read_chain(ledger)
            findings = audit_records(run, chain)
            by_round: dict[int, list[str]] = {}
            for f in findings:
                if f.round is not None:
                    by_round.setdefault(f.round, []).append(str(f))
            labels = {rule.index: rule.label for rule in chain.rules}
            table = Table(title=f"{run.name}: governance records (from the chain)")
            for col in (
                "Round",
                "Rule",
                "Aggregation commitment",
                "Committee record",
                "Members",
                "Permission changes",
                "Audit query",
            ):
                table.add_column(col)
            for r in sorted(set(chain.rounds()) | set(by_round)):
                if round_ is not None and r != round_:
                    continue
                agg = chain.by_round.get(r)
                coms = [c for c in chain.committees if c.round_id == r]
                perms = "; ".join(
                    f"{p.node} {p.old.name.lower()}→{p.new.name.lower()} (#{p.proposal_id}"
                    f"{'' if p.proposal_id in chain.changes else ', not applied'})"
                    for p in chain.proposals
                    if p.round_id == r
                )
                problems = by_round.get(r, [])
                members = "; ".join(
                    "[" + ", ".join(m.removeprefix("client") for m in c.members) + "]" for c in coms
                )
                table.add_row(
                    f"Round {r}",
                    labels.get(agg.rule_index, "?") if agg else "—",
                    f"agg_r{r} {_short(agg.model_hash)}" if agg else "—",
                    ", ".join(f"committee_e{c.election_id}" for c in coms) or "—",
                    members,
                    perms,
                    "MISMATCH: " + "; ".join(problems) if problems else "Success",
                )
            out.print(table)
            rest = [f for f in findings if f.round is None]
            if rest and round_ is None:
                out.print("Not tied to a round: " + "; ".join(str(f) for f in rest))
    except GeoflError as err:
        raise fail(str(err)) from None


@ledger_app.command("verify")
def verify(
    run_dir: RunDirArg,
    method: MethodOpt = None,
    seed: SeedOpt = None,
    expect_head: Annotated[
        str | None,
        typer.Option(
            help="The head hash published elsewhere (a 'head:' line of an earlier verify): "
            "the chain must end at exactly that block. Needs one governed run (--method, "
            "--seed)."
        ),
    ] = None,
) -> None:
    """Replay every ledger and check the run directory against it; exit 1 on any mismatch.

    Checked against the chain: every round's record in rounds.jsonl (one per committed
    round, in order, model and update-set hashes), every entry of governance.jsonl (rule,
    aggregation commitments, committees, permission proposals and changes, transaction
    hashes), the rule document and config.yaml, the model hashes of checkpoint.pt (the
    last round) and best.pt (the best-validation round), and the round counts final.json,
    summary.json and config.yaml state (a finished run must have committed every round it
    claims). Each chain's head is printed ('head: …'): publish it elsewhere and pass it
    back with --expect-head to catch a directory rewritten whole, which nothing inside it
    can reveal.
    """
    from geofl.governance.audit import verify_run

    try:
        verified, problems = verify_run(run_dir, method, seed, expect_head)
    except GeoflError as err:
        raise fail(str(err)) from None
    for v in verified:
        out.print(
            f"ok: {v}: chain replayed; rounds.jsonl, governance.jsonl, rule, config, "
            "checkpoint.pt, best.pt and the round counts stated (final.json, summary.json) "
            "match it",
            soft_wrap=True,
        )
        if v.head is not None:
            note = " (the anchored head)" if expect_head is not None else ""
            out.print(f"head: {v.run}: {v.head}{note}", highlight=False, soft_wrap=True)
    if problems:
        err_console = Console(stderr=True)
        for p in problems:
            err_console.print(
                f"[bold red]mismatch:[/] {escape(str(p))}", highlight=False, soft_wrap=True
            )
        raise typer.Exit(code=1)


@ledger_app.command("committee")
def committee(run_dir: RunDirArg, method: MethodOpt = None, seed: SeedOpt = None) -> None:
    """Every committee election: members, candidates, Rep and P (000 Eq. 23)."""
    from geofl.governance.audit import governance_log

    try:
        for run, ledger in _ledgers(run_dir, method, seed):
            table = Table(title=f"{run.name}: committee elections")
            for col in (
                "Election",
                "Round",
                "Members (chain)",
                "Candidates: Rep / P",
                "Seed commitment",
            ):
                table.add_column(col)
            for e in governance_log(run):
                com = e.get("committee")
                if com is None:
                    continue
                rec = ledger.committee(int(com["election_id"]))
                cands = ", ".join(
                    f"{c['node']}: {c['reputation']:.3f}/{c['probability']:.2f}"
                    for c in com["candidates"]
                )
                table.add_row(
                    str(rec.election_id),
                    str(rec.round_id),
                    ", ".join(rec.members),
                    cands,
                    _short(rec.seed_hash),
                )
            out.print(table)
    except GeoflError as err:
        raise fail(str(err)) from None


@ledger_app.command("permissions")
def permissions(run_dir: RunDirArg, method: MethodOpt = None, seed: SeedOpt = None) -> None:
    """Permission proposals and changes from the chain's events (000 Table 3 layout)."""
    from geofl.governance.ledger import PermissionApproved, PermissionChanged, PermissionProposed

    try:
        for run, ledger in _ledgers(run_dir, method, seed):
            approvals: dict[int, list[str]] = {}
            for ev in ledger.events(PermissionApproved):
                approvals.setdefault(ev.proposal_id, []).append(ev.member)
            changed = {ev.proposal_id for ev in ledger.events(PermissionChanged)}
            table = Table(title=f"{run.name}: permission governance")
            for col in (
                "Client",
                "Trigger",
                "Round",
                "Old status",
                "New status",
                "Approver",
                "Applied",
                "Record ID",
            ):
                table.add_column(col)
            for prop in ledger.events(PermissionProposed):
                approvers = ", ".join(approvals.get(prop.proposal_id, []))
                table.add_row(
                    prop.node,
                    prop.reason,
                    f"Round {prop.round_id}",
                    prop.old.name.lower(),
                    prop.new.name.lower(),
                    f"committee_e{prop.election_id} ({approvers})",
                    "yes" if prop.proposal_id in changed else "no",
                    f"perm_{prop.node}_r{prop.round_id} (#{prop.proposal_id})",
                )
            out.print(table)
    except GeoflError as err:
        raise fail(str(err)) from None


@ledger_app.command("reputation")
def reputation(
    run_dir: RunDirArg,
    node: Annotated[int, typer.Option(help="Client id.")],
    method: MethodOpt = None,
    seed: SeedOpt = None,
    plot: Annotated[Path | None, typer.Option(help="Write the Fig. 13-style plot here.")] = None,
) -> None:
    """A node's reputation components over rounds (000 Eq. 18–22, Fig. 13)."""
    from geofl.governance.audit import find_ledgers, governance_log

    try:
        runs = find_ledgers(run_dir, method, seed)
        run = runs[0]
        rows: list[dict[str, Any]] = []
        for e in governance_log(run):
            comp = e["reputation"].get(str(node))
            if comp is not None:
                rows.append({"round": e["round"], **comp, "level": e["levels"].get(str(node))})
        if not rows:
            raise GeoflError(f"--node: client {node} is not governed in {run.name}")
        table = Table(title=f"{run.name}: reputation of client {node}")
        for col in (
            "Round",
            "Contribution",
            "Participation",
            "Consistency",
            "Reputation",
            "Miss streak",
            "Level",
        ):
            table.add_column(col)
        for r in rows:
            table.add_row(
                str(r["round"]),
                f"{r['contribution']:.3f}",
                f"{r['participation']:.3f}",
                f"{r['consistency']:.3f}",
                f"{r['reputation']:.3f}",
                str(r["miss_streak"]),
                str(r["level"]),
            )
        out.print(table)
        if plot is not None:
            from geofl.report.governance_plots import plot_reputation

            drawn = plot_reputation(rows, plot, title=f"{run.name}, client {node}")
            out.print(f"plot: {escape(str(drawn))}")
    except GeoflError as err:
        raise fail(str(err)) from None


@ledger_app.command("build")
def build(
    run_dir: RunDirArg,
    method: Annotated[str, typer.Option(help="Method whose run to govern.")],
    seed: Annotated[int, typer.Option(help="Seed whose run to govern.")],
    governance: Annotated[
        Path | None, typer.Option(help="YAML governance section (default: the run's, or defaults).")
    ] = None,
) -> None:
    """Offline mode: build a governance ledger from a finished run's round log."""
    import yaml
    from pydantic import ValidationError

    from geofl.governance.config import GovernanceConfig
    from geofl.governance.subscriber import build_offline
    from geofl.registry import format_validation_error

    try:
        raw: Any = None
        source = governance if governance is not None else run_dir / "config.yaml"
        try:
            if governance is not None:
                raw = yaml.safe_load(governance.read_text())
            elif source.exists():
                raw = (yaml.safe_load(source.read_text()) or {}).get("governance")
        except (OSError, yaml.YAMLError) as err:
            raise GeoflError(f"--governance: cannot read {source}: {err}") from None
        try:
            cfg = GovernanceConfig.model_validate(raw or {})
        except ValidationError as err:
            raise format_validation_error(err, "governance") from None
        sd = build_offline(run_dir, method, seed, cfg)
        out.print(f"ledger: {escape(str(sd / 'ledger'))}")
    except GeoflError as err:
        raise fail(str(err)) from None
