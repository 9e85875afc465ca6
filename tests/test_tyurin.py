"""Tyurin (2024), arXiv 2412.08424: on the worst-case separable set of Theorem 5.1, gradient
descent on the logistic loss with large steps behaves like the perceptron and needs a number
of steps that grows with n, while Normalized LR+GD (step lr / mean_i sigma(-y_i <a_i, x>))
separates the data in a few steps. Measured through `workbench run`, as a user would."""

import json

import pytest

from workbench.cli import main as cli


def steps_to_separate(capsys, method: str, n: int) -> float:
    args = ["run", "logreg", *method.split(), "dataset=tyurin_worst_case", f"n_samples={n}",
            "init_scale=0", "target_metric=train/accuracy", "--steps", "2000", "--json",
            "--device", "cpu"]
    assert cli.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["train/accuracy"] == 1.0
    return out["train/steps_to_target"]


@pytest.mark.parametrize("n", [100, 400])
def test_normalized_lr_separates_in_far_fewer_steps_than_gd_at_large_steps(capsys, n):
    gd = min(steps_to_separate(capsys, f"step_size=constant step_size.lr={lr}", n)
             for lr in (10, 100, 1000, 10000))
    normalized = steps_to_separate(capsys, "step_size=normalized_lr step_size.lr=10", n)
    assert normalized <= 5
    assert gd >= 5 * normalized, (gd, normalized)


def test_gd_steps_grow_with_n_but_normalized_lr_steps_do_not(capsys):
    gd = [steps_to_separate(capsys, "step_size=constant step_size.lr=1000", n)
          for n in (50, 200, 800)]
    normalized = [steps_to_separate(capsys, "step_size=normalized_lr step_size.lr=10", n)
                  for n in (50, 200, 800)]
    assert gd[0] < gd[1] < gd[2] and gd[2] >= 3 * gd[0]
    assert max(normalized) <= 5
