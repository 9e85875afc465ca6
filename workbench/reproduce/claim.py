"""A reproduction's ``claim.yaml``: the paper's claim, its sweeps, what its quick form shrinks,
and the checks that decide whether the claim's shape holds, read from the results files alone.

    claim: the claim in one or two sentences
    reference: the paper (authors, title, year; where in the seed literature)
    sweeps: [sweep.yaml]                # sweep specs in the reproduction's folder
    credit: [credit.yaml]               # `workbench credit` specs beside it (optional)
    quick: {sweep.yaml: {budget: {steps: 100}}}   # merged into the spec for --quick
    figures: [curves_train-loss_step.png]         # report figures kept in results/
    curves: [train/suboptimality]       # per-step IQM over the best trial's seeds -> CSV
    paper: {column: steps_to_target, values: {LABEL: 2, ...}}   # the paper's numbers
    quick_tolerance: {rtol: 1e-9, atol: 1e-12, why: ...}  # a rerun quick form vs results/quick
    fits: [{name: NAME, sweep: SWEEP, curve: train/loss, target: 0.46, direction: minimize,
            model: batch_noise, x: {LABEL: 8, ...}}]     # workbench.reproduce.fits
    checks:
      - says: what must hold
        left: {method: LABEL, column: iqm}           # a column of the report's table
        op: "<="
        right: 5                                     # a number or another reference
        factor: 1.0                                  # right is multiplied by it
        full_only: false                             # true: not checked on --quick results

A reference names a method (its label in the sweep) and one of: a ``column`` of the report's
results table (``table_SWEEP.csv``: ``iqm``, ``mean``, ``mean_high``, ``steps_to_target``, ...)
or, with ``file``, a column of another CSV of the results folder (the row whose ``method`` is
the label, e.g. ``rates_train-fw_gap_summary``: a fitted rate with its interval over seeds);
or a ``slope``: the least-squares slope of log(value) against log(step) of that curve's CSV
over ``window`` (steps), on 50 log-spaced steps; or a ``change``: the drift of that curve over
``window``, the least-squares line's slope times the window's width (``linear_change``). A
slope or change with ``seeds: low`` or ``high`` is that end of the 95% interval (Student-t
on the mean) of the fits of each seed's curve.
With ``credit: NAME`` (a credit spec's name) it names an estimator's row of that study's
table (``credit_NAME.csv``) at group size ``G`` and ``N`` continuations, and a ``column`` of
it (``spearman``, ``sign_agreement_low``, ...). A fit (``fits``) writes ``fit_NAME.csv``, a
row per parameter (``method``: ``S_min``, ``B_noise``, ...; columns ``estimate``, ``ci_low``,
``ci_high``, ``n``), and ``fit_NAME_points.csv``, a row per arm (``method``: its label), which
a check reads with ``file``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from workbench.common.validation import SpecError, Strict, validate
from workbench.reproduce import fits as claim_fits

CLAIM_FILE = "claim.yaml"
# a sweep's method label (spec.MethodEntry), or a combination of labels joined by "+"
LABEL = r"^[A-Za-z0-9][A-Za-z0-9_.=+-]{0,200}$"
OPS = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
       ">=": lambda a, b: a >= b, "==": lambda a, b: a == b}


class Ref(Strict):
    """A number read from the results: a table column, a curve's log-log slope or its linear
    change over a window."""

    method: str = Field(pattern=LABEL, description="the method's label in the sweep")
    sweep: str | None = Field(None, description="the sweep's name (default: the first)")
    column: str | None = Field(None, description="a column of the report's results table")
    slope: str | None = Field(None, description="a metric listed under curves")
    change: str | None = Field(None, description="a metric listed under curves: its fitted "
                                                 "change over window")
    window: tuple[float, float] | None = Field(None, description="steps [low, high] of the "
                                                                 "slope's or change's fit")
    seeds: Literal["low", "high"] | None = Field(
        None, description="a slope's or change's 95% interval end over the seeds (each seed's "
                          "fit, Student-t on the mean) instead of the fit of the IQM curve")
    file: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.=+-]{0,200}$",
                             description="a CSV of the results folder (without .csv, e.g. "
                                         "rates_train-fw_gap_summary): its row of the method "
                                         "and a column")
    credit: str | None = Field(None, description="a credit study's name: the row of its "
                                                  "table at G and N")
    G: int | None = Field(None, ge=1, description="credit: the group size of the row")
    N: int | None = Field(None, ge=1, description="credit: the continuations of the row")

    @model_validator(mode="after")
    def _one_kind(self) -> Ref:
        if sum(kind is not None for kind in (self.column, self.slope, self.change)) != 1:
            raise ValueError("give one of column, slope or change")
        if self.curve is not None and (self.window is None or not
                                       0 <= self.window[0] < self.window[1]):
            raise ValueError(f"a {'slope' if self.slope else 'change'} needs window: "
                             "[low, high] with 0 <= low < high")
        if self.slope is not None and self.window[0] == 0:
            raise ValueError("a slope needs window: [low, high] with 0 < low < high")
        if self.seeds is not None and self.curve is None:
            raise ValueError("seeds (an interval end over seeds) needs a slope or a change")
        if self.file is not None and (self.column is None or self.credit is not None):
            raise ValueError("a file reference needs a column (and no credit)")
        if (self.credit is not None) != (self.G is not None and self.N is not None) or \
                (self.credit is not None and self.column is None):
            raise ValueError("a credit reference needs credit, G, N and a column (only)")
        return self

    @property
    def curve(self) -> str | None:
        """The metric whose curve the reference reads (a slope's or a change's)."""
        return self.slope or self.change

    def describe(self) -> str:
        if self.credit is not None:
            return f"{self.method}.{self.column} (credit {self.credit}, G={self.G}, N={self.N})"
        if self.column is not None:
            where = f" ({self.file}.csv)" if self.file else ""
            return f"{self.method}.{self.column}{where}"
        kind = "slope" if self.slope is not None else "change"
        end = f" (95% interval's {self.seeds} end over seeds)" if self.seeds else ""
        return f"{kind} of {self.method}'s {self.curve} over steps {self.window[0]:g}-" \
               f"{self.window[1]:g}{end}"


class Check(Strict):
    says: str = Field(description="what must hold, in words")
    left: Ref
    op: Literal["<", "<=", ">", ">=", "=="]
    right: float | Ref
    factor: float = Field(1.0, gt=0, description="right is multiplied by it")
    full_only: bool = Field(False, description="true: checked on the full-size results only "
                                               "(exact paper numbers)")


class Tolerance(Strict):
    """How far a rerun quick form's numbers may lie from the committed ones (``numpy.isclose``:
    ``|new - old| <= atol + rtol * |old|``), and why."""

    rtol: float = Field(1e-9, ge=0, description="relative tolerance")
    atol: float = Field(1e-12, ge=0, description="absolute tolerance")
    why: str = Field("float64 optimisation: another CPU rounds a few last bits differently "
                     "(vector width, summation order), nothing more",
                     description="why this tolerance: what may differ between machines")


class PaperValues(Strict):
    column: str = Field(description="the results table's column the paper's numbers match")
    values: dict[str, float] = Field(description="method label -> the paper's number")
    sweep: str | None = None


class Claim(Strict):
    claim: str
    reference: str
    sweeps: list[str] = Field(min_length=1, description="sweep specs beside claim.yaml")
    credit: list[str] = Field(default_factory=list, description="`workbench credit` specs "
                                                                "beside claim.yaml")
    quick: dict[str, dict[str, Any]] = Field(default_factory=dict,
                                             description="sweep or credit file -> keys "
                                                         "merged in for --quick")
    figures: list[str] = Field(default_factory=list, description="report figures to keep")
    curves: list[str] = Field(default_factory=list, description="metrics whose curves to keep")
    paper: PaperValues | None = None
    checks: list[Check] = Field(min_length=1)
    quick_tolerance: Tolerance = Field(default_factory=Tolerance,
                                       description="how close a rerun quick form must come "
                                                   "to the committed quick numbers")
    fits: list[claim_fits.Fit] = Field(default_factory=list,
                                       description="models fitted to the kept curves "
                                                   "(workbench.reproduce.fits)")

    @model_validator(mode="after")
    def _consistent(self) -> Claim:
        unknown = sorted(set(self.quick) - set(self.sweeps) - set(self.credit))
        if unknown:
            raise ValueError(f"quick names {', '.join(unknown)}, not among sweeps or credit")
        for check in self.checks:
            for ref in (check.left, check.right):
                if isinstance(ref, Ref) and ref.curve is not None and \
                        ref.curve not in self.curves:
                    raise ValueError(f"a check's curve of {ref.curve} needs it under curves")
        return self


def load(folder: Path) -> Claim:
    """The claim of a reproduction folder; a bad file is one SpecError naming it."""
    from workbench.spec.sweep import read_yaml

    path = folder / CLAIM_FILE
    claim = validate(Claim, read_yaml(path), str(path))
    for key in ("sweeps", "credit"):
        for name in getattr(claim, key):
            if not (folder / name).is_file():
                raise SpecError(str(path), key, f"{name}: no such file in {folder}")
    if claim.fits:  # what the fits name, against the curves and the sweeps' labels
        found = claim_fits.problems(claim, folder)
        if found:
            raise SpecError(str(path), *found[0], more=found[1:])
    return claim


def folders(root: Path) -> dict[str, Path]:
    """Every reproduction under ``root`` (a folder with a claim.yaml), by name."""
    return {p.parent.name: p.parent for p in sorted(root.glob(f"*/{CLAIM_FILE}"))}
