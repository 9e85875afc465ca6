"""The supervised and convex testbeds: data sets, exact f*, constraints, the digits network,
per-sample gradients and steps_to_target."""

import math

import pytest
import torch
from pydantic import ValidationError

from workbench import registry
from workbench.common import seeds
from workbench.testbeds import TASKS, Budget
from workbench.testbeds.optimisation import datasets
from workbench.testbeds.optimisation.least_squares import LeastSquaresParams
from workbench.testbeds.optimisation.least_squares import make_problem as make_least_squares
from workbench.testbeds.optimisation.logreg import LogReg, LogRegParams, make_data
from workbench.testbeds.optimisation.loop import per_sample_stats
from workbench.testbeds.optimisation.mlp import MLP, MLPParams
from workbench.testbeds.optimisation.mlp import build_problem as build_mlp
from workbench.testbeds.optimisation.simplex import Simplex, SimplexParams, l1_ball_lmo, simplex_lmo
from workbench.testbeds.optimisation.simplex import build_problem as build_simplex

CPU = torch.device("cpu")


def run(task, params, step_size, steps=20, seed=0):
    history = []
    out = task().run(params, {"step_size": step_size}, seed=seed, device=CPU,
                     budget=Budget(steps=steps),
                     log=lambda step, metrics: history.append((step, dict(metrics))))
    return out, history


def constant(lr):
    return registry.get("step_size", "constant")(lr=lr)


# --- data sets -----------------------------------------------------------------------------

def test_bundled_and_generated_sets_have_the_right_shapes_and_labels():
    cases = {
        "gaussian": (make_data(LogRegParams(n_samples=30, dim=4), 0), (30, 4)),
        "tyurin_two_point": (datasets.tyurin_two_point(), (2, 2)),
        "tyurin_worst_case": (datasets.tyurin_worst_case(12), (12, 2)),
        "breast_cancer": (datasets.breast_cancer(), (569, 30)),
        "digits_binary": (datasets.digits_binary((0, 1)), (360, 64)),
    }
    for name, ((x, y), shape) in cases.items():
        assert x.shape == shape and y.shape == (shape[0],), name
        assert set(y.unique().tolist()) == {-1.0, 1.0}, name
    x, y = datasets.breast_cancer()
    assert int((y == 1).sum()) == 357  # benign
    assert torch.allclose(x.mean(0), torch.zeros(30, dtype=x.dtype), atol=1e-12)
    assert torch.allclose(x.std(0), torch.ones(30, dtype=x.dtype), atol=1e-12)
    x, y = datasets.digits_binary((3, 8))
    assert x.shape == (357, 64) and int((y == 1).sum()) == 183  # 183 threes, 174 eights
    x, labels = datasets.digits()
    assert x.shape == (1797, 64) and labels.unique().tolist() == list(range(10))


def test_tyurin_worst_case_is_theorem_5_1():
    x, y = datasets.tyurin_worst_case(10)
    assert x[0].tolist() == [0.5, -1.0] and y[0] == 1.0
    assert x[1:].tolist() == [[-0.5, -1.0]] * 9 and y[1:].tolist() == [-1.0] * 9


def test_tyurin_two_point_is_theorem_4_1():
    """From w = 0 with step gamma: f(w_1) = (log(1 + e^{gamma/4}) + log(1 + e^{-7 gamma/2})) / 2
    and w_2 / gamma -> (1, 1/4), which separates the data: accuracy 1.0 at step 2."""
    gamma = 100.0
    params = LogRegParams(dataset="tyurin_two_point", init_scale=0.0,
                          target_metric="train/accuracy")
    _, history = run(LogReg, params, constant(gamma), steps=4)
    first = (math.log1p(math.exp(gamma / 4)) + math.log1p(math.exp(-3.5 * gamma))) / 2
    assert history[1][1]["train/loss"] == pytest.approx(first, rel=1e-12)
    assert history[1][1]["train/accuracy"] == 0.5
    assert history[2][1]["train/min_margin"] == pytest.approx(0.75 * gamma, rel=1e-6)
    reached = [m["train/steps_to_target"] for _, m in history]
    assert math.isnan(reached[0]) and math.isnan(reached[1]) and reached[2:] == [2.0] * 3


def test_large_step_gd_on_the_worst_case_needs_steps_growing_with_n():
    reached = []
    for n in (10, 40):
        params = LogRegParams(dataset="tyurin_worst_case", n_samples=n, init_scale=0.0,
                              target_metric="train/accuracy")
        out, _ = run(LogReg, params, constant(1e4), steps=100)
        reached.append(out["train/steps_to_target"])
    assert 1 < reached[0] < reached[1] <= 100


def test_gaussian_data_is_the_original_generator():
    """The default data set draws exactly what logreg drew before data sets were added."""
    params = LogRegParams(n_samples=50, dim=6, margin=0.3, label_noise=0.1)
    gen = seeds.torch_generator(11, "data")  # seed 11's data stream
    w_star = torch.randn(6, generator=gen, dtype=torch.float64)
    w_star /= w_star.norm()
    x = torch.randn(50, 6, generator=gen, dtype=torch.float64)
    y = torch.sign(x @ w_star)
    y[y == 0] = 1.0
    flips = torch.rand(50, generator=gen, dtype=torch.float64) < 0.1
    x += 0.3 * y[:, None] * w_star[None, :]
    y[flips] *= -1.0
    got_x, got_y = make_data(params, 11)
    assert torch.equal(got_x, x) and torch.equal(got_y, y)


def test_bias_appends_a_constant_feature():
    x, _ = make_data(LogRegParams(dataset="breast_cancer", bias=True), 0)
    assert x.shape == (569, 31) and torch.all(x[:, -1] == 1.0)


def test_logreg_refuses_parameters_its_data_set_ignores():
    with pytest.raises(ValidationError, match="dim\n.*does not apply to dataset"):
        LogRegParams(dataset="breast_cancer", dim=5)
    LogRegParams(dataset="breast_cancer", dim=20)  # a dumped config repeats the defaults
    with pytest.raises(ValidationError, match="digits_classes"):
        LogRegParams(dataset="digits_binary", digits_classes=(4, 4))
    with pytest.raises(ValidationError, match="needs a target_value"):
        LogRegParams(target_metric="train/min_margin")
    LogRegParams(dataset="tyurin_worst_case", n_samples=20)  # n is the theorem's n


@pytest.mark.parametrize("target", [("train/accuracy", None), ("train/min_margin", 0.05),
                                    ("train/loss", 0.3)])
def test_steps_to_target_is_the_first_step_the_target_holds(target):
    metric, value = target
    params = LogRegParams(n_samples=200, dim=5, margin=0.3, target_metric=metric,
                          target_value=value)
    out, history = run(LogReg, params, constant(2.0), steps=60)
    level = 1.0 if value is None else value
    holds = [m[metric] >= level if metric != "train/loss" else m[metric] <= level
             for _, m in history]
    first = holds.index(True)
    assert 0 < first < 60
    for step, metrics in history:
        logged = metrics["train/steps_to_target"]
        assert (math.isnan(logged) if step < first else logged == first), step
    assert out["train/steps_to_target"] == first


# --- least squares -------------------------------------------------------------------------

def test_least_squares_f_star_is_exact_and_the_condition_number_is_as_set():
    params = LeastSquaresParams(n_samples=200, dim=20, condition_number=1e3, noise=0.5)
    a, b, x_star, f_star, smoothness = make_least_squares(params, 0)
    grad = a.T @ (a @ x_star - b) / 200
    assert float(grad.norm()) < 1e-12
    assert float(0.5 * ((a @ x_star - b) ** 2).mean()) == f_star and f_star > 0
    eigenvalues = torch.linalg.eigvalsh(a.T @ a / 200)
    assert float(eigenvalues.max() / eigenvalues.min()) == pytest.approx(1e3, rel=1e-8)
    assert smoothness == pytest.approx(1.0, rel=1e-12)
    _, _, _, noiseless, _ = make_least_squares(LeastSquaresParams(noise=0.0), 0)
    assert abs(noiseless) < 1e-20


def test_least_squares_converges_full_batch_and_runs_minibatches():
    from workbench.testbeds.optimisation.least_squares import LeastSquares

    params = LeastSquaresParams(n_samples=100, dim=10, condition_number=10.0)
    out, _ = run(LeastSquares, params, constant(1.0), steps=300)
    assert abs(out["train/suboptimality"]) < 1e-10
    out, history = run(LeastSquares, params.model_copy(update={"batch_size": 10}),
                       constant(0.1), steps=50)
    assert history[-1][1]["cost/samples"] == 500
    assert out["train/suboptimality"] < history[0][1]["train/suboptimality"] / 10


# --- simplex -------------------------------------------------------------------------------

def vertices(d, radius=None):
    eye = torch.eye(d, dtype=torch.float64)
    return eye if radius is None else torch.cat([radius * eye, -radius * eye])


def test_lmo_returns_the_best_vertex():
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        g = torch.randn(5, generator=gen, dtype=torch.float64)
        for lmo, corners in ((simplex_lmo(g), vertices(5)),
                             (l1_ball_lmo(g, 2.5), vertices(5, 2.5))):
            best = corners[torch.argmin(corners @ g)]
            assert torch.equal(lmo, best)


@pytest.mark.parametrize("problem", ["portfolio", "l1_least_squares"])
def test_simplex_f_star_is_below_every_feasible_point_and_certified(problem):
    params = SimplexParams(problem=problem, dim=8, n_samples=40)
    built = build_simplex(params, 0, CPU, 10)
    assert built.info["f_star_accuracy"] <= 1e-12
    gen = torch.Generator().manual_seed(1)
    points = torch.distributions.Dirichlet(torch.ones(8, dtype=torch.float64)).sample((500,))
    if problem == "l1_least_squares":
        signs = torch.randint(0, 2, (500, 8), generator=gen).to(torch.float64) * 2 - 1
        points = points * signs
    x = built.variables[0]
    for point in points:
        with torch.no_grad():
            x.copy_(point)
        assert built.evaluate()["train/suboptimality"] >= -1e-12


@pytest.mark.parametrize("problem", ["portfolio", "l1_least_squares"])
def test_frank_wolfe_iterates_stay_in_the_set(problem):
    params = SimplexParams(problem=problem, dim=10, n_samples=50, init="vertex")
    out, history = run(Simplex, params, registry.get("step_size", "fw_open_loop")(), steps=50)
    assert all(m["train/infeasibility"] <= 1e-12 for _, m in history)
    assert out["train/suboptimality"] <= out["train/fw_gap"] + 1e-12
    assert history[0][1]["train/fw_gap"] > 10 * out["train/fw_gap"]


def test_parameters_a_variant_ignores_are_refused():
    with pytest.raises(ValidationError, match="radius\n.*does not apply to problem"):
        SimplexParams(problem="portfolio", radius=3.0)
    with pytest.raises(ValidationError, match="hidden_layers\n.*model 'mlp' only"):
        MLPParams(model="cnn", hidden_layers=2)


# --- the digits network --------------------------------------------------------------------

@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_network_trains_and_beats_chance(model):
    out, history = run(MLP, MLPParams(model=model), constant(0.1), steps=50)
    assert out["train/loss"] < history[0][1]["train/loss"] / 2
    assert out["val/accuracy"] > 0.5  # chance: 0.1
    assert history[-1][1]["cost/samples"] == 50 * 64


def test_network_is_reproducible_and_the_seed_matters():
    params = MLPParams(width=16)
    _, first = run(MLP, params, constant(0.1), steps=10, seed=4)
    _, again = run(MLP, params, constant(0.1), steps=10, seed=4)
    _, other = run(MLP, params, constant(0.1), steps=10, seed=5)

    def strip(history):
        return [{k: v for k, v in m.items() if k != "time/wall_seconds"} for _, m in history]

    assert strip(first) == strip(again)
    assert strip(first) != strip(other)


def test_network_split_is_seeded_and_standardised_by_the_training_set():
    problem = build_mlp(MLPParams(), 0, CPU, 1)
    x_train, _ = problem.data
    assert problem.n_samples == 1437  # 360 = ceil(0.2 * 1797) held out, as scikit-learn does
    spread = x_train.std(0)
    assert torch.allclose(x_train.mean(0), torch.zeros(64), atol=1e-5)
    assert torch.allclose(spread[spread > 0], torch.ones(int((spread > 0).sum())), atol=1e-5)


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_per_sample_statistics_match_a_loop_over_samples(model):
    problem = build_mlp(MLPParams(model=model, width=16, hidden_layers=1), 0, CPU, 1)
    batch = torch.tensor([3, 17, 256, 1000, 42])
    _, stats = per_sample_stats(problem, batch)
    rows = []
    for i in batch:
        grads = torch.autograd.grad(problem.batch_loss(i.reshape(1)), problem.variables)
        rows.append(torch.cat([g.reshape(-1) for g in grads]))
    per_sample = torch.stack(rows)
    mean = per_sample.mean(0)
    assert stats["big_batch_size"] == 5 and stats["small_batch_size"] == 1
    assert stats["grad_sq_big"] == pytest.approx(float(mean @ mean), rel=1e-4)
    assert stats["grad_sq_small"] == pytest.approx(float((per_sample**2).sum(1).mean()),
                                                   rel=1e-4)
    assert stats["grad_var"] == pytest.approx(float(((per_sample - mean) ** 2).sum() / 4),
                                              rel=1e-4)


def test_eval_every_thins_the_validation_metrics_and_keeps_the_last_step():
    _, history = run(MLP, MLPParams(width=16, eval_every=3), constant(0.1), steps=7)
    with_val = [step for step, m in history if "val/loss" in m]
    assert with_val == [0, 3, 6, 7]  # the last step always: a final val/* objective exists
    assert all("train/loss" in m for _, m in history)


def test_a_samples_budget_ending_between_evaluations_still_logs_the_last_step():
    """Stopped by ``budget.samples`` (8 samples of 4 a step: at step 2) before the first
    ``eval_every`` step, alone and on a seed axis: val/* at step 0 and at the last step."""
    params = MLPParams(width=16, eval_every=50, batch_size=4)
    budget = Budget(steps=100, samples=8)
    alone: list[int] = []
    MLP().run(params, {"step_size": constant(0.1)}, seed=0, device=CPU, budget=budget,
              log=lambda step, m: alone.append(step) if "val/loss" in m else None)
    together: list[int] = []
    MLP().run_seeds(params, {"step_size": constant(0.1)}, seeds=[0, 1], device=CPU,
                    budget=budget, log=lambda step, rows: together.append(step)
                    if all(r is not None and "val/loss" in r for r in rows) else None)
    assert alone == together == [0, 2]


# --- every new task ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["least_squares", "simplex", "mlp", "logreg"])
def test_each_task_declares_what_it_logs(name):
    task = TASKS[name]
    method = (registry.get("step_size", "fw_open_loop")() if name == "simplex"
              else constant(0.05))
    params = task.Params() if name != "logreg" else LogRegParams(
        dataset="digits_binary", target_metric="train/accuracy")
    out, history = run(task, params, method, steps=3)
    assert task.default_objective in task.metrics
    logged = set().union(*(m for _, m in history))
    assert set(task.metrics) <= logged, set(task.metrics) - logged
    assert out["steps"] == 3
