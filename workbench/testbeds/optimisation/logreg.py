"""Binary logistic regression on a generated or bundled data set.

Loss: f(w) = mean_i log(1 + exp(-y_i <x_i, w>)) + (l2 / 2) ||w||^2 >= 0, labels in {-1, +1}.
Data sets (``dataset``; see workbench.testbeds.optimisation.datasets):

- ``gaussian`` (default): x ~ N(0, I_d), y = sign(<x, w*>) flipped with probability
  ``label_noise``, every point pushed ``margin`` away from the boundary along y w*;
- ``tyurin_two_point``: the two points of Theorem 4.1 of Tyurin (2024), arXiv 2412.08424;
- ``tyurin_worst_case``: the n points of its Theorem 5.1 (n = ``n_samples``);
- ``breast_cancer``: scikit-learn's bundled Wisconsin set, standardised (569 x 30);
- ``digits_binary``: two classes of scikit-learn's bundled digits, standardised (x 64).

A parameter the chosen data set does not read (``dim`` for ``breast_cancer``, ...) must keep
its default. Tyurin's theorems start GD at w = 0: set ``init_scale=0``. ``bias`` appends a
constant-1 feature. ``target_metric``/``target_value`` log ``train/steps_to_target``, the
first step (0 = the initial point) at which the metric reaches the value (NaN until then);
``train/accuracy`` counts strictly positive margins, so accuracy 1.0 means every point is
separated. ``train/min_margin`` = min_i y_i <x_i, w>. Step-size methods may read the step's
``margins``, the Hessian-vector product of the step's loss (``hvp``) and the directional
derivatives of the step's two class logits (0, <x_i, w>) (``logit_jvp``).
"""

from __future__ import annotations

from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, ValidationInfo, field_validator, model_validator

from workbench.testbeds.base import OneThreadParams, Task, cpu_threads
from workbench.testbeds.optimisation import datasets
from workbench.testbeds.optimisation.loop import (
    Problem,
    Pure,
    Target,
    batches_per_epoch,
    matvec,
    pure_problem,
    random_start,
    rows,
    with_horizon,
)
from workbench.testbeds.optimisation.seed_axis import train_one, train_seeds

Digit = Annotated[int, Field(ge=0, le=9)]

# The parameters each data set reads; the others must keep their defaults.
_READS = {
    "gaussian": {"n_samples", "dim", "margin", "label_noise"},
    "tyurin_two_point": set(),
    "tyurin_worst_case": {"n_samples"},
    "breast_cancer": set(),
    "digits_binary": {"digits_classes"},
}
_DATA_KEYS = ("n_samples", "dim", "margin", "label_noise", "digits_classes")


class LogRegParams(OneThreadParams):
    dataset: Literal["gaussian", "tyurin_two_point", "tyurin_worst_case", "breast_cancer",
                     "digits_binary"] = "gaussian"
    n_samples: int = Field(512, ge=2, le=10_000_000,
                           description="gaussian and tyurin_worst_case only")
    dim: int = Field(20, ge=1, le=100_000, description="gaussian only")
    margin: float = Field(0.1, ge=0.0, description="gaussian only")
    label_noise: float = Field(0.0, ge=0.0, lt=0.5, description="gaussian only")
    digits_classes: tuple[Digit, Digit] = Field(
        (0, 1), description="digits_binary: the digit labelled +1, the digit labelled -1")
    bias: bool = Field(False, description="append a constant-1 feature")
    l2: float = Field(0.0, ge=0.0)
    batch_size: int | None = Field(None, ge=1, description="None: full batch")
    data_seed: int | None = Field(None, description="None: the run's seed draws the data")
    init_scale: float = Field(1.0, ge=0.0, description="w_0 ~ init_scale * N(0, I)")
    dtype: Literal["float32", "float64"] = "float64"
    target_metric: Literal["train/accuracy", "train/min_margin", "train/loss"] | None = Field(
        None, description="log train/steps_to_target for this metric")
    target_value: float | None = Field(
        None, description="the level to reach (train/accuracy: 1.0 when unset)")
    target_direction: Literal["maximize", "minimize"] | None = Field(
        None, description="None: the metric's natural direction")

    @field_validator(*_DATA_KEYS)
    @classmethod
    def _read_by_the_dataset(cls, value, info: ValidationInfo):
        dataset = info.data.get("dataset")
        if (dataset is not None and info.field_name not in _READS[dataset]
                and value != cls.model_fields[info.field_name].default):
            raise ValueError(f"does not apply to dataset {dataset!r} (its data set fixes it); "
                             "remove the key")
        return value

    @model_validator(mode="after")
    def _consistent(self):
        if self.digits_classes[0] == self.digits_classes[1]:
            raise ValueError("digits_classes must name two different digits")
        if self.target_metric is None and self.target_value is not None:
            raise ValueError("target_value needs a target_metric")
        if self.target_metric not in (None, "train/accuracy") and self.target_value is None:
            raise ValueError(f"target_metric {self.target_metric!r} needs a target_value")
        return self


def make_data(params: LogRegParams, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Features (n, d) and labels in {-1, +1}, drawn on the CPU so every device sees the same."""
    dtype = getattr(torch, params.dtype)
    if params.dataset == "gaussian":
        x, y = datasets.gaussian(params.n_samples, params.dim, params.margin,
                                 params.label_noise, seed, dtype)
    elif params.dataset == "tyurin_two_point":
        x, y = datasets.tyurin_two_point(dtype)
    elif params.dataset == "tyurin_worst_case":
        x, y = datasets.tyurin_worst_case(params.n_samples, dtype)
    elif params.dataset == "breast_cancer":
        x, y = datasets.breast_cancer(dtype)
    else:
        x, y = datasets.digits_binary(params.digits_classes, dtype)
    if params.bias:
        x = torch.cat([x, torch.ones(x.shape[0], 1, dtype=dtype)], dim=1)
    return x, y


def target_of(params: LogRegParams) -> Target | None:
    if params.target_metric is None:
        return None
    value = 1.0 if params.target_value is None else params.target_value
    direction = params.target_direction or LogReg.metrics[params.target_metric]
    return Target(params.target_metric, value, direction)


def pure_formulas(params: LogRegParams, x: torch.Tensor, y: torch.Tensor) -> Pure:
    """The loss and the metrics as functions of (w,) and the data (x, y), over any leading
    (seed) axes."""

    def penalty(w):
        return 0.5 * params.l2 * (w * w).sum(-1)

    def loss(variables, data, idx):
        (w,), (xs, ys) = variables, data
        xb, yb = (xs, ys) if idx is None else rows(idx, xs, ys)
        value = F.softplus(-yb * matvec(xb, w)).mean(-1)
        return value + penalty(w) if params.l2 else value

    def metrics(variables, data):
        (w,), (xs, ys) = variables, data
        margins = ys * matvec(xs, w)
        return {
            "train/loss": F.softplus(-margins).mean(-1) + penalty(w),
            "train/accuracy": (margins > 0).to(xs.dtype).mean(-1),
            "train/min_margin": margins.amin(-1),
        }

    def margins(variables, data, idx):
        """y_i <x_i, w> of the step's rows (``REQUIRABLE["margins"]``)."""
        (w,), (xs, ys) = variables, data
        xb, yb = (xs, ys) if idx is None else rows(idx, xs, ys)
        return yb * matvec(xb, w)

    def hvp(variables, data, idx, vectors):
        """H v of the step's rows' loss (``REQUIRABLE["hvp"]``): X^T diag(s_i (1 - s_i)) X v / b
        + l2 v with s_i = sigma(y_i <x_i, w>)."""
        (w,), (xs, ys), (v,) = variables, data, vectors
        xb, yb = (xs, ys) if idx is None else rows(idx, xs, ys)
        margin = yb * matvec(xb, w)
        curvature = torch.sigmoid(margin) * torch.sigmoid(-margin) * matvec(xb, v)
        product = (xb * curvature.unsqueeze(-1)).sum(-2) / xb.shape[-2]
        return [product + params.l2 * v if params.l2 else product]

    def logit_jvp(variables, data, idx, directions):
        """J v of the step's rows' two class logits (0, <x_i, w>) (``REQUIRABLE["logit_jvp"]``):
        (0, <x_i, v>); P(y = +1) = softmax(0, <x_i, w>)_2 = sigma(<x_i, w>)."""
        (xs, _), (v,) = data, directions
        xb = xs if idx is None else rows(idx, xs)[0]
        slope = matvec(xb, v)
        return torch.stack([torch.zeros_like(slope), slope], dim=-1)

    return Pure((x, y), loss, metrics,
                inputs={"margins": margins, "hvp": hvp, "logit_jvp": logit_jvp})


def build_problem(params: LogRegParams, seed: int, device: torch.device,
                  total_steps: int) -> Problem:
    data_seed = seed if params.data_seed is None else params.data_seed
    x, y = (t.to(device) for t in make_data(params, data_seed))
    n, dim = x.shape
    w = random_start(dim, params.init_scale, seed, device, x.dtype, draw_dtype=x.dtype)

    def sample_loss(variables, xi, yi):
        (v,) = variables
        return F.softplus(-yi * (xi @ v)) + 0.5 * params.l2 * (v @ v)

    info = {
        "loss_lower_bound": 0.0,
        "batches_per_epoch": batches_per_epoch(n, params.batch_size),
        "total_steps": total_steps,
    }  # margins, hvp, logit_jvp: the formulas' (pure_formulas)
    return pure_problem([w], n, pure_formulas(params, x, y), info, sample_loss=sample_loss,
                        data=(x, y))


class LogReg(Task):
    name = "logreg"
    description = ("logistic regression: Gaussian classes with a margin, Tyurin's two-point and "
                   "worst-case sets, breast cancer, two digits")
    slots = ("step_size", "batch_size")
    default_methods = {"batch_size": "constant"}
    provides = frozenset({"closure", "loss_lower_bound", "per_sample_grads", "margins", "hvp",
                          "logit_jvp"})
    Params = LogRegParams
    metrics = {
        "train/loss": "minimize",
        "train/accuracy": "maximize",
        "train/min_margin": "maximize",
        "train/grad_norm": "minimize",
        "train/steps_to_target": "minimize",
    }
    bounds = {"train/loss": (0.0, None)}  # logistic loss plus an L2 penalty
    default_objective = "train/loss"

    @classmethod
    def objective_problem(cls, params, metric, methods):
        if metric == "train/steps_to_target" and params.target_metric is None:
            return "it is logged only with a target (task.params.target_metric)"
        return None

    def run(self, params, methods, *, seed, device, budget, log):
        with cpu_threads(device, params.cpu_threads):
            problem = with_horizon(build_problem(params, seed, device, budget.steps), budget,
                                   params.batch_size)
            return train_one(problem, methods["step_size"], batch_size=params.batch_size,
                             budget=budget, seed=seed, device=device, log=log,
                             batch_method=methods.get("batch_size"), target=target_of(params))

    def run_seeds(self, params, methods, *, seeds, device, budget, log):
        with cpu_threads(device, params.cpu_threads):
            problems = [with_horizon(build_problem(params, seed, device, budget.steps), budget,
                                     params.batch_size) for seed in seeds]
            return train_seeds(problems, methods["step_size"], batch_size=params.batch_size,
                               budget=budget, seeds=seeds, device=device, log=log,
                               batch_method=methods.get("batch_size"), target=target_of(params))
