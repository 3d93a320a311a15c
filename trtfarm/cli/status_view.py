"""``trtfarm status`` for a terminal: the matrix, or a block per model where it does not fit, and why not released.

A fix that several cells share is said once, under them.

A missing target the latest run skipped says what to install: the same sentence for every model, differing at most
in a version. Each cell keeps what is missing (the version included) and points at the fix, which is printed once
(``VERSION`` standing for the version each cell names where they differ), so 3 models of 4 such targets are 16
lines at 80 columns, not 50.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from trtfarm.cli.common import message_text, out
from trtfarm.cli.grid import grid_lines
from trtfarm.cli.tables import labelled

STATE_STYLE = {"released": "green", "pending": "yellow", "stale": "dark_orange", "failed": "bold red",
               "refused": "bold magenta", "damaged": "bold magenta", "missing": "dim"}
CANDIDATE_STYLE = {"holds": "green", "waits": "yellow", "fails": "bold red", "damaged": "bold red"}
VERSION = "VERSION"


def _n(count: int, noun: str) -> str:
    """``1 model``, ``2 models``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _fix_patterns() -> list[tuple[str, re.Pattern]]:
    """The fixes cells share, as they end a reason (``...; FIX``): each toolchain's install hint, any version."""
    from trtfarm.machine.flavour import INSTALL_HINT

    return [(hint, re.compile("; (" + re.escape(hint).replace(VERSION, r"[\w.+!-]+") + ")$"))
            for hint in INSTALL_HINT.values()]


@dataclass
class SharedFixes:
    """The fixes that end more than one cell's reason: each said once, numbered when there are several."""

    fixes: dict[str, list[str]] = field(default_factory=dict)  # template -> the fix text of each cell that ends so
    patterns: list[tuple[str, re.Pattern]] = field(default_factory=_fix_patterns)

    @classmethod
    def of(cls, reasons: list[str]) -> SharedFixes:
        """The fixes shared by two reasons or more of ``reasons``."""
        found = cls()
        for reason in reasons:
            template, fix = found._match(reason)
            if template:
                found.fixes.setdefault(template, []).append(fix)
        found.fixes = {t: f for t, f in found.fixes.items() if len(f) > 1}
        return found

    def _match(self, reason: str) -> tuple[str, str]:
        for template, pattern in self.patterns:
            m = pattern.search(reason)
            if m:
                return template, m.group(1)
        return "", ""

    def short(self, reason: str) -> str:
        """``reason`` without a shared fix at its end, pointing at the fix instead."""
        template, fix = self._match(reason)
        if template not in self.fixes:
            return reason
        number = f" {list(self.fixes).index(template) + 1}" if len(self.fixes) > 1 else ""
        return f"{reason[:-len(fix) - 2]} (fix{number} below)"

    def print(self) -> None:
        """Each shared fix once (``VERSION`` where the cells name different versions)."""
        for i, (template, fixes) in enumerate(self.fixes.items(), 1):
            text = fixes[0] if len(set(fixes)) == 1 else f"{template} ({VERSION}: the one each names)"
            labelled(out, f"fix{f' {i}' if len(self.fixes) > 1 else ''}:", message_text(text))


def print_status(found, wide: bool = False) -> None:
    """The matrix for a terminal, folded into one block per model when the targets do not fit across."""
    from rich.measure import Measurement

    from trtfarm.reports.fleet_html import CELL_TEXT, cell_text

    counts = ", ".join(f"{n} {s}" for s, n in found.counts().items() if n) or "nothing"
    out.print(message_text(f"fleet status: {_n(len(found.models), 'model')} x {_n(len(found.targets), 'target')} in "
                           f"{found.store}: {counts}"), highlight=False)
    rows = [(model, [found.cell(model, t) for t in found.targets]) for model in found.models]
    texts = [[model, *(cell_text(c) if c else "·" for c in cells)] for model, cells in rows]
    # the widest text of each column, less than Rich's measure of the table: over the width, the matrix cannot fit
    # (measuring 1,000 rows through Rich costs a second)
    narrowest = sum(max(cell_len(t) for t in column) for column in zip(["model", *found.targets], *texts, strict=True))
    table = Table("model", *(escape(t) for t in found.targets), show_lines=False)
    if wide or narrowest <= out.width:
        for (model, cells), text in zip(rows, texts, strict=True):
            table.add_row(escape(model), *(f"[{STATE_STYLE[c.state]}]{t}[/]" if c else "[dim]·[/]"
                                           for c, t in zip(cells, text[1:], strict=True)))
    if wide or (narrowest <= out.width and
                Measurement.get(out, out.options.update_width(10_000), table).maximum <= out.width):
        out.print(table)
        out.print(message_text(f"{CELL_TEXT['released']} AGE released (* engine check pending on its GPU), "
                               "pend waiting for its engine check or, in candidate, for promotion, stale, FAIL "
                               "failed, REFU refused by serving hosts, DMG damaged, — missing, · not a target of the "
                               "model"), highlight=False)
        _why(found)
        _candidates(found)
        return
    fixes = SharedFixes.of([c.reason for c in found.cells if c.state != "released"])
    widths = (2 + max(map(len, found.targets), default=0), 8)
    for model in found.models:
        out.print(message_text(model), style="bold", highlight=False)
        rows = _model_rows(found, model, fixes)
        lines = grid_lines(out, rows, widths)  # Rich's grid's lines, drawn at a fraction of its cost
        if lines is None:
            block = Table.grid(padding=(0, 2))
            block.add_column(no_wrap=True, min_width=widths[0])
            block.add_column(no_wrap=True, min_width=widths[1])
            block.add_column()
            for first, second, last in rows:
                block.add_row(escape(first), second, last)
            out.print(block)
        elif lines:
            out.print(Text("\n").join(lines), soft_wrap=True)
    fixes.print()


def _model_rows(found, model: str, fixes: SharedFixes) -> list[tuple[str, Text, str]]:
    """One model's targets, a row each: its state and the facts (released) or the reason (else)."""
    from trtfarm.vocabulary.fleetview import age_text

    rows = []
    for target in found.targets:
        c = found.cell(model, target)
        if c is None:
            continue
        if c.state == "released":
            facts = [f"{age_text(c.age_s)} ago", c.precision, f"engine {c.engine}", c.signed]
            detail = ", ".join(f for f in facts if f)
        else:
            detail = fixes.short(c.reason) + (f" (since {c.since[:16].replace('T', ' ')})" if c.since and c.state ==
                                              "failed" else "")
        rows.append((f"  {target}", Text.assemble((c.state, STATE_STYLE[c.state])), message_text(detail)))
        if c.candidate and c.candidate_verdict != "already":
            verdict = Text.assemble((c.candidate_verdict, CANDIDATE_STYLE.get(c.candidate_verdict, "yellow")))
            rows.append(("    candidate", verdict, message_text(f"{c.candidate.split('/')[-1]}: {c.candidate_detail}")))
    return rows


def _candidates(found) -> None:
    """The candidate channel beside stable, a line per target with a candidate: its build and what it waits for."""
    from trtfarm.layout import short_ref

    for c in found.cells:
        if c.candidate and c.candidate_verdict != "already":
            build = c.candidate.split("/")[-1]
            stable = short_ref(c.manifest).split("/")[-1] if c.state == "released" and c.manifest else "nothing"
            labelled(out, f"  [{CANDIDATE_STYLE.get(c.candidate_verdict, 'yellow')}]candidate[/]", message_text(
                f"{c.target} of {c.model}: {build} {c.candidate_verdict} (stable {stable})"
                + (f": {c.candidate_detail}" if c.candidate_detail else "")))


def _why(found) -> None:
    """Why targets are failed, stale, pending (or missing, where a run said why): a line per target, state, reason."""
    from trtfarm.vocabulary.fleetview import NOTHING_RELEASED  # not on --help's path

    groups: dict[tuple[str, str, str], list] = {}
    for c in found.cells:
        if c.state in ("failed", "stale", "pending", "refused", "damaged") or \
                (c.state == "missing" and c.reason != NOTHING_RELEASED):
            groups.setdefault((c.target, c.state, c.reason), []).append(c)
    fixes = SharedFixes.of([c.reason for cells in groups.values() for c in cells])
    for (target, state, reason), cells in groups.items():
        since = min((c.since for c in cells if c.since), default=None) if state == "failed" else None
        names = [c.model for c in cells]
        who = names[0] if len(names) == 1 else f"{len(names)} models ({', '.join(names[:5])}" + (
            ", ...)" if len(names) > 5 else ")")
        labelled(out, f"  [{STATE_STYLE[state]}]{state}[/]", message_text(
            f"{target} of {who}: {fixes.short(reason)}" + (f" (since {since[:16].replace('T', ' ')})"
                                                           if since else "")))
    fixes.print()
