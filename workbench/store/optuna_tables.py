"""A store's Optuna studies and trials read from Optuna's tables with SQL, for `workbench status`
and `workbench dashboard`: importing Optuna and opening its storage (which checks the schema
with Alembic) cost more than half a second; the store's schema revision is checked already
(``workbench.store.database.Store.check``). Read only; the engine writes through Optuna.

The table layout is Optuna's RDB storage (``optuna/storages/_rdb/models.py``): ``studies``,
``trials`` (``state`` by name), ``trial_values`` (``value_type`` FINITE, INF_POS or INF_NEG),
``trial_params`` (the internal value and its distribution as JSON) and
``trial_user_attributes`` (values as JSON).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import sqlalchemy as sa


@dataclass(frozen=True)
class TrialRow:
    """One trial as `status` reads it; ``state`` is Optuna's state name (``COMPLETE``, ...)."""

    number: int
    state: str
    value: float | None = None
    params: dict = field(default_factory=dict)
    user_attrs: dict = field(default_factory=dict)


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(url, poolclass=sa.pool.NullPool)


def study_ids(url: str) -> dict[str, int]:
    """Study name -> Optuna's study id."""
    with _engine(url).connect() as conn:
        return dict(conn.execute(sa.text("SELECT study_name, study_id FROM studies")).all())


def study_user_attrs(url: str, study_id: int) -> dict:
    """The study's user attributes (values parsed from JSON)."""
    with _engine(url).connect() as conn:
        rows = conn.execute(sa.text("SELECT key, value_json FROM study_user_attributes WHERE "
                                    "study_id = :s"), {"s": study_id}).all()
    return {key: json.loads(value) for key, value in rows}


def trials(url: str, study_id: int) -> list[TrialRow]:
    """The study's trials, by number, with their first objective's value, parameters (in
    their external form) and user attributes."""
    where = "t.study_id = :s"
    with _engine(url).connect() as conn:
        rows = conn.execute(sa.text(f"SELECT t.trial_id, t.number, t.state FROM trials t "
                                    f"WHERE {where} ORDER BY t.number"), {"s": study_id}).all()
        values = conn.execute(sa.text(
            f"SELECT v.trial_id, v.value, v.value_type FROM trial_values v JOIN trials t ON "
            f"t.trial_id = v.trial_id WHERE {where} AND v.objective = 0"), {"s": study_id})
        params = conn.execute(sa.text(
            f"SELECT p.trial_id, p.param_name, p.param_value, p.distribution_json FROM "
            f"trial_params p JOIN trials t ON t.trial_id = p.trial_id WHERE {where} "
            f"ORDER BY p.param_id"),
            {"s": study_id}).all()
        attrs = conn.execute(sa.text(
            f"SELECT a.trial_id, a.key, a.value_json FROM trial_user_attributes a JOIN trials "
            f"t ON t.trial_id = a.trial_id WHERE {where}"), {"s": study_id}).all()
        value_of = {trial: _value(value, kind) for trial, value, kind in values}
    by_params: dict[int, dict] = {}
    for trial, name, internal, distribution in params:
        by_params.setdefault(trial, {})[name] = external(internal, json.loads(distribution))
    by_attrs: dict[int, dict] = {}
    for trial, key, value in attrs:
        by_attrs.setdefault(trial, {})[key] = json.loads(value)
    return [TrialRow(number, _state_name(state), value_of.get(trial), by_params.get(trial, {}),
                     by_attrs.get(trial, {})) for trial, number, state in rows]


def _state_name(state) -> str:
    """The state's name: stored by name (a database enum), or as its number by an old SQLite
    store (Optuna's TrialState order)."""
    if isinstance(state, int):
        return ("RUNNING", "COMPLETE", "PRUNED", "FAIL", "WAITING")[state]
    return str(getattr(state, "name", state))


def _value(value: float | None, kind: str) -> float | None:
    kind = getattr(kind, "name", kind)
    return {"INF_POS": math.inf, "INF_NEG": -math.inf}.get(kind, value)


def external(internal: float, distribution: dict):
    """A parameter's value as the trial saw it, from Optuna's internal float: a category for
    a categorical distribution, an int for an integer one, the float otherwise."""
    kind, attributes = distribution["name"], distribution["attributes"]
    if kind == "CategoricalDistribution":
        return attributes["choices"][int(internal)]
    if kind in ("IntDistribution", "IntUniformDistribution", "IntLogUniformDistribution"):
        return int(internal)
    return float(internal)
