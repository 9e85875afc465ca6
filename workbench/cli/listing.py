"""What ``workbench methods`` and ``workbench tasks`` print: a table that fits ``WIDTH``
columns (long fields cut with ``…``; the detail view has them whole), the detail view of one
method or task with every parameter's type, default, range and help, and the same as JSON."""

from __future__ import annotations

import textwrap
from typing import Any

WIDTH = 100


# ---------------------------------------------------------------------------------- methods


def method_summary(detail: dict[str, Any]) -> dict[str, Any]:
    """The table's row of a method's detail."""
    return {"name": detail["name"], "family": detail["family"],
            "fidelity": detail["fidelity"], "reference": detail["paper"],
            "hyperparameters": list(detail["hyperparameters"])}


def methods_table(rows: list[dict[str, Any]]) -> str:
    table = [{**r, "fidelity": "reconstructed †" if r["fidelity"] == "reconstructed"
              else r["fidelity"], "hyperparameters": ", ".join(r["hyperparameters"]) or "—"}
             for r in rows]
    return fit(table, ["name", "family", "fidelity", "reference", "hyperparameters"],
               wide=("reference", "hyperparameters")) + (
        "\n\nworkbench methods FAMILY/NAME shows one method whole; --json for scripts")


def method_text(detail: dict[str, Any]) -> str:
    lines = [f"{detail['key']}  ({detail['fidelity']})", *_wrapped("reference",
                                                                   detail["reference"])]
    if detail["requires"]:
        lines += _wrapped("requires", ", ".join(detail["requires"]))
    lines += _wrapped("seed axis", "yes: runs a trial's seeds as one computation "
                      "(execution: {seeds: vectorised})" if detail["vectorised"]
                      else "no: its trials run their seeds one after another")
    lines += _wrapped("module", detail["module"])
    if detail["doc"]:
        lines += ["", *textwrap.wrap(" ".join(detail["doc"].split()), WIDTH)]
    lines += ["", "hyperparameters:" if detail["hyperparameters"] else "no hyperparameters"]
    for name, hp in detail["hyperparameters"].items():
        search = (f"tuned over {hp['search']}" if hp["search"]
                  else "fixed unless a sweep gives it a range")
        lines += textwrap.wrap(f"{name} ({hp['type']}): default {hp['default']!r}; {search}",
                               WIDTH, initial_indent="  ", subsequent_indent="      ")
        lines += [f"      {line}" for line in textwrap.wrap(
            f"allowed: {hp['allowed']}" + (f". {hp['help']}" if hp["help"] else ""),
            WIDTH - 6)]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ tasks


def task_summary(detail: dict[str, Any]) -> dict[str, Any]:
    """The table's row of a task's detail."""
    return {key: detail[key] for key in ("name", "slots", "description")}


def tasks_table(rows: list[dict[str, Any]]) -> str:
    table = [{**r, "slots": ", ".join(r["slots"])} for r in rows]
    return fit(table, ["name", "slots", "description"], wide=("description",)) + (
        "\n\nworkbench tasks NAME shows one task's parameters and metrics; --json for scripts")


def task_text(detail: dict[str, Any]) -> str:
    lines = [detail["name"], *textwrap.wrap(detail["description"], WIDTH), ""]
    slots = [f"{s} (default: {detail['defaults'][s]})" if s in detail["defaults"] else
             f"{s} (no default: name a method)" for s in detail["slots"]]
    lines += _wrapped("slots", "; ".join(slots))
    lines += _wrapped("provides", ", ".join(detail["provides"]) or "—")
    lines += _wrapped("metrics", ", ".join(f"{k} ({v})" for k, v in detail["metrics"].items()))
    lines += _wrapped("objective", f"{detail['objective']} by default")
    lines += _wrapped("seed axis", "yes: execution: {seeds: vectorised} runs a trial's seeds as "
                      "one computation" if detail["seed_axis"]
                      else "no: a trial runs its seeds one after another")
    lines += ["", "parameters:"]
    for name, p in detail["parameters"].items():
        bounds = f"; {p['bounds']}" if p["bounds"] else ""
        lines += textwrap.wrap(f"{name} ({p['type']}): default {p['default']!r}{bounds}",
                               WIDTH, initial_indent="  ", subsequent_indent="      ")
        if p["help"]:
            lines += [f"      {line}" for line in textwrap.wrap(p["help"], WIDTH - 6)]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------- layout


def fit(rows: list[dict[str, Any]], columns: list[str], wide: tuple[str, ...]) -> str:
    """A table of ``columns`` at most ``WIDTH`` wide: the narrow columns as they are, the
    ``wide`` ones sharing what is left, cut with ``…``."""
    text = {c: [str(r.get(c, "")) for r in rows] for c in columns}
    natural = {c: max(len(c), *(len(t) for t in text[c])) for c in columns}
    narrow = sum(natural[c] for c in columns if c not in wide) + 2 * (len(columns) - 1)
    left = max(10 * len(wide), WIDTH - narrow)
    widths = dict(natural)
    want = sum(natural[c] for c in wide)
    if want > left:
        for c in wide:  # each wide column gets its share, at least what it needs below it
            widths[c] = max(len(c), min(natural[c], left * natural[c] // want))
    def cell(c, t):
        return (t if len(t) <= widths[c] else t[: widths[c] - 1] + "…").ljust(widths[c])
    lines = ["  ".join(c.ljust(widths[c]) for c in columns).rstrip(),
             "  ".join("-" * widths[c] for c in columns)]
    for i in range(len(rows)):
        lines.append("  ".join(cell(c, text[c][i]) for c in columns).rstrip())
    return "\n".join(lines)


def _wrapped(label: str, text: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=f"{label}: ",
                         subsequent_indent=" " * (len(label) + 2)) or [f"{label}:"]
