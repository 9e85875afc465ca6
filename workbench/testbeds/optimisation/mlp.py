"""A small network on scikit-learn's bundled digits (8x8 images, 10 classes); cross-entropy.

Data: the 1797 digits split into train and validation (ceil(``val_fraction`` n) held out, as
scikit-learn's train_test_split counts; seeded), pixels standardised with the training set's
per-pixel mean and std. Models (float32):

- ``mlp``: 64 -> [width -> ReLU] x hidden_layers -> 10;
- ``cnn``: conv 3x3 (1 -> width/4 channels, padding 1) -> ReLU -> conv 3x3 stride 2
  (-> width/2 channels, padding 1) -> ReLU -> linear (width/2 * 16 -> 10).

Weights use PyTorch's default initialisation, drawn from the run's seed. Each logged step
evaluates loss and accuracy on the full train and validation sets (every ``eval_every``
steps for the validation set; ``train/loss`` is always logged). Losses, metrics and per-sample
gradients go through ``torch.func.functional_call`` over the parameters in
``model.parameters()`` order; on a seed axis (``run_seeds``) the S seeds' networks are
stacked and those formulas mapped with ``torch.func.vmap``, an ensemble of S models.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, ValidationInfo, field_validator
from torch import nn

from workbench.common import seeds
from workbench.testbeds.base import OneThreadParams, Task, cpu_threads
from workbench.testbeds.optimisation import datasets
from workbench.testbeds.optimisation.loop import (
    Problem,
    Pure,
    batches_per_epoch,
    pure_problem,
    with_horizon,
)
from workbench.testbeds.optimisation.seed_axis import train_one, train_seeds

N_CLASSES = 10


class MLPParams(OneThreadParams):
    model: Literal["mlp", "cnn"] = "mlp"
    width: int = Field(64, ge=4, le=4096, description="hidden units (cnn: 4x the first "
                                                       "layer's channels)")
    hidden_layers: int = Field(1, ge=1, le=2, description="mlp only")
    val_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    batch_size: int | None = Field(64, ge=1, description="None: full batch")
    eval_every: int = Field(1, ge=1, description="log val/* every this many steps")
    data_seed: int | None = Field(None, description="None: the run's seed draws the split")

    @field_validator("hidden_layers")
    @classmethod
    def _mlp_only(cls, value, info: ValidationInfo):
        if info.data.get("model") == "cnn" and value != 1:
            raise ValueError("applies to model 'mlp' only; remove the key")
        return value


def make_model(params: MLPParams) -> nn.Module:
    if params.model == "mlp":
        layers: list[nn.Module] = [nn.Flatten()]
        width_in = 64
        for _ in range(params.hidden_layers):
            layers += [nn.Linear(width_in, params.width), nn.ReLU()]
            width_in = params.width
        return nn.Sequential(*layers, nn.Linear(width_in, N_CLASSES))
    first, second = max(params.width // 4, 1), max(params.width // 2, 1)
    return nn.Sequential(
        nn.Unflatten(1, (1, 8, 8)),
        nn.Conv2d(1, first, 3, padding=1), nn.ReLU(),
        nn.Conv2d(first, second, 3, stride=2, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(second * 16, N_CLASSES),
    )


def make_split(params: MLPParams, seed: int):
    """(x_train, y_train, x_val, y_val) on the CPU: a seeded split, standardised by train."""
    x, y = datasets.digits(torch.float32)
    order = torch.randperm(len(y), generator=seeds.torch_generator(seed, "data"))
    n_val = min(math.ceil(params.val_fraction * len(y)), len(y) - 1)
    val, tr = order[:n_val], order[n_val:]
    x_train, x_val = datasets.standardise(x[tr]), datasets.standardise(x[val], x[tr])
    return x_train, y[tr], x_val, y[val]


def build_problem(params: MLPParams, seed: int, device: torch.device,
                  total_steps: int) -> Problem:
    data_seed = seed if params.data_seed is None else params.data_seed
    x_train, y_train, x_val, y_val = (t.to(device) for t in make_split(params, data_seed))
    # PyTorch's default initialisation draws from the global RNG: seed it inside fork_rng
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seeds.int_seed(seed, "init"))
        model = make_model(params)
    model = model.to(device)
    names = [name for name, _ in model.named_parameters()]
    variables = list(model.parameters())

    def forward(params_list, x):
        return torch.func.functional_call(model, dict(zip(names, params_list, strict=True)),
                                          (x,))

    def loss(params_list, data, idx):
        xs, ys = data[0], data[1]
        xb, yb = (xs, ys) if idx is None else (xs[idx], ys[idx])
        return F.cross_entropy(forward(params_list, xb), yb)

    def scores(params_list, x, y, split):
        logits = forward(params_list, x)
        return {f"{split}/loss": F.cross_entropy(logits, y),
                f"{split}/accuracy": (logits.argmax(1) == y).float().mean()}

    def sample_loss(params_list, xi, yi):
        return F.cross_entropy(forward(params_list, xi.unsqueeze(0)), yi.unsqueeze(0))

    pure = Pure((x_train, y_train, x_val, y_val), loss,
                lambda p, data: scores(p, data[0], data[1], "train"),
                occasional=lambda p, data: scores(p, data[2], data[3], "val"),
                every=params.eval_every, one_seed=True)
    info = {"loss_lower_bound": 0.0, "total_steps": total_steps,
            "batches_per_epoch": batches_per_epoch(len(y_train), params.batch_size)}
    return pure_problem(variables, len(y_train), pure, info, sample_loss=sample_loss,
                        data=(x_train, y_train))


class MLP(Task):
    name = "mlp"
    description = "a small MLP or CNN on the bundled 8x8 digits (10 classes); train/val split"
    slots = ("step_size", "batch_size")
    default_methods = {"batch_size": "constant"}
    provides = frozenset({"closure", "loss_lower_bound", "per_sample_grads"})
    Params = MLPParams
    metrics = {"train/loss": "minimize", "train/accuracy": "maximize",
               "val/loss": "minimize", "val/accuracy": "maximize",
               "train/grad_norm": "minimize"}
    bounds = {"train/loss": (0.0, None), "val/loss": (0.0, None)}  # cross-entropy
    default_objective = "train/loss"

    def run(self, params, methods, *, seed, device, budget, log):
        with cpu_threads(device, params.cpu_threads):
            problem = with_horizon(build_problem(params, seed, device, budget.steps), budget,
                                   params.batch_size)
            return train_one(problem, methods["step_size"], batch_size=params.batch_size,
                             budget=budget, seed=seed, device=device, log=log,
                             batch_method=methods.get("batch_size"))

    def run_seeds(self, params, methods, *, seeds, device, budget, log):
        with cpu_threads(device, params.cpu_threads):
            problems = [with_horizon(build_problem(params, seed, device, budget.steps), budget,
                                     params.batch_size) for seed in seeds]
            return train_seeds(problems, methods["step_size"], batch_size=params.batch_size,
                               budget=budget, seeds=seeds, device=device, log=log,
                               batch_method=methods.get("batch_size"))
