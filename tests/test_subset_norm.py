"""subset_norm (methods/step_size/subset_norm.py): its update computed by hand with explicit
subsets, its limits (one subset: AdaGrad-Norm; subsets of one coordinate: Adam), the subset
choice and the real loop."""

import math

import pytest
import torch

from methods.step_size.subset_norm import chunk_size
from workbench import registry
from workbench.testbeds import Budget
from workbench.testbeds.optimisation.logreg import LogReg

# f(W, b) = 1/2 sum D_W (W - T_W)^2 + 1/2 sum D_b (b - T_b)^2: the gradient is D (x - T)
D_W = torch.tensor([[1.0, 2.0, 0.5], [3.0, 0.25, 1.5]], dtype=torch.float64)
T_W = torch.tensor([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]], dtype=torch.float64)
W0 = torch.tensor([[2.0, 1.0, -1.0], [0.0, 1.5, 1.0]], dtype=torch.float64)
D_B = torch.tensor([2.0, 0.5, 1.0], dtype=torch.float64)
T_B = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
B0 = torch.tensor([-1.0, 0.5, 2.5], dtype=torch.float64)


def method(name, **params):
    return registry.get("step_size", name)(**params)


def problem():
    w, b = W0.clone().requires_grad_(True), B0.clone().requires_grad_(True)

    def closure(backward=True):
        value = 0.5 * (D_W * (w - T_W) ** 2).sum() + 0.5 * (D_B * (b - T_B) ** 2).sum()
        if backward:
            w.grad = b.grad = None
            value.backward()
        return value.detach()

    return w, b, closure


def by_hand(steps, subsets_of, *, lr, beta1, beta2, eps, mean, correct_bias):
    """The update of the module docstring on flat lists, each tensor's subsets given as lists
    of flat indices by ``subsets_of(name)``; returns the iterates after each step."""
    x = {"W": W0.reshape(-1).tolist(), "b": B0.tolist()}
    d = {"W": D_W.reshape(-1).tolist(), "b": D_B.tolist()}
    t_ = {"W": T_W.reshape(-1).tolist(), "b": T_B.tolist()}
    m = {k: [0.0] * len(v) for k, v in x.items()}
    v = {k: [0.0] * len(subsets_of(k)) for k in x}
    out = []
    for t in range(1, steps + 1):
        a = lr
        if correct_bias:
            a = lr * (math.sqrt(1 - beta2**t) if beta2 < 1 else 1.0) / (1 - beta1**t)
        for k in x:
            g = [d[k][i] * (x[k][i] - t_[k][i]) for i in range(len(x[k]))]
            m[k] = [beta1 * m[k][i] + (1 - beta1) * g[i] if beta1 > 0 else g[i]
                    for i in range(len(g))]
            for s, subset in enumerate(subsets_of(k)):
                r = sum(g[i] ** 2 for i in subset)
                if mean:
                    r /= len(subset)
                v[k][s] = beta2 * v[k][s] + (1 - beta2) * r if beta2 < 1 else v[k][s] + r
                for i in subset:
                    x[k][i] -= a * m[k][i] / (math.sqrt(v[k][s]) + eps)
        out.append((torch.tensor(x["W"], dtype=torch.float64).reshape(2, 3),
                    torch.tensor(x["b"], dtype=torch.float64)))
    return out


def run(steps, **params):
    w, b, closure = problem()
    opt = method("subset_norm", **params).build([w, b], {"total_steps": steps})
    path = []
    for _ in range(steps):
        opt.step(closure)
        assert opt.last_step_size == params.get("lr", 1e-3)
        path.append((w.detach().clone(), b.detach().clone()))
    return path


def assert_paths(ours, theirs, rtol=1e-13):
    for (w, b), (w_hand, b_hand) in zip(ours, theirs, strict=True):
        assert torch.allclose(w, w_hand, rtol=rtol, atol=1e-15)
        assert torch.allclose(b, b_hand, rtol=rtol, atol=1e-15)


def test_adagrad_form_with_the_papers_subsets_by_hand():
    # W is 2 x 3 (fewer rows than columns): one subset per column, {0, 3}, {1, 4}, {2, 5};
    # the vector b stays coordinate-wise
    columns = {"W": [[0, 3], [1, 4], [2, 5]], "b": [[0], [1], [2]]}
    hp = {"lr": 0.3, "beta1": 0.0, "beta2": 1.0, "eps": 1e-3, "correct_bias": False}
    assert_paths(run(6, **hp), by_hand(6, columns.__getitem__, mean=False, **hp))


def test_rows_when_the_matrix_is_tall():
    w = torch.zeros(3, 2, requires_grad=True)
    opt = method("subset_norm", beta1=0.0, beta2=1.0, correct_bias=False, eps=0.0,
                 lr=1.0).build([w], {"total_steps": 1})

    def closure():
        w.grad = torch.tensor([[3.0, 4.0], [1.0, 0.0], [0.0, -2.0]])
        return torch.tensor(0.0)

    opt.step(closure)
    # one accumulator per row: each row moves by -g / ||g_row||
    assert torch.allclose(w.detach(), -torch.tensor([[0.6, 0.8], [1.0, 0.0], [0.0, -1.0]]))
    assert opt.state[w]["exp_avg_sq"].shape == (3, 1)


def test_adam_form_with_chunks_and_mean_by_hand():
    # chunks of 2: W's 6 entries in {0, 1}, {2, 3}, {4, 5}; b's 3 entries: 2 -> 1 (a divisor)
    chunks = {"W": [[0, 1], [2, 3], [4, 5]], "b": [[0], [1], [2]]}
    hp = {"lr": 0.05, "beta1": 0.8, "beta2": 0.95, "eps": 1e-4, "correct_bias": True}
    ours = run(8, subsets="chunks", subset_size=2, reduce="mean", **hp)
    assert_paths(ours, by_hand(8, chunks.__getitem__, mean=True, **hp))
    # the sum differs from the mean on subsets of two
    summed = run(8, subsets="chunks", subset_size=2, **hp)
    assert not torch.allclose(summed[-1][0], ours[-1][0])
    assert_paths(summed, by_hand(8, chunks.__getitem__, mean=False, **hp))


def test_one_subset_is_adagrad_norm():
    x = B0.clone().requires_grad_(True)
    y = B0.clone().requires_grad_(True)

    def closure_of(p):
        def closure(backward=True):
            value = 0.5 * (D_B * (p - T_B) ** 2).sum()
            if backward:
                p.grad = None
                value.backward()
            return value.detach()
        return closure

    ours = method("subset_norm", lr=0.4, beta1=0.0, beta2=1.0, eps=0.0, correct_bias=False,
                  subsets="chunks", subset_size=3).build([x], {})
    theirs = method("adagrad_norm", eta=0.4, b0=1e-12).build([y], {"total_steps": 10})
    for _ in range(10):
        ours.step(closure_of(x))
        theirs.step(closure_of(y))
        assert torch.allclose(x.detach(), y.detach(), rtol=1e-12, atol=1e-14)


def test_subsets_of_one_coordinate_are_adam():
    # eps = 0: Adam's eps sits after the bias-corrected root, this one before the correction
    w, b, closure = problem()
    ours = method("subset_norm", lr=0.02, eps=0.0, subsets="chunks", subset_size=1).build(
        [w, b], {})
    w2, b2 = W0.clone().requires_grad_(True), B0.clone().requires_grad_(True)
    theirs = torch.optim.Adam([w2, b2], lr=0.02, betas=(0.9, 0.999), eps=0.0)
    for _ in range(15):
        ours.step(closure)
        theirs.zero_grad()
        (0.5 * (D_W * (w2 - T_W) ** 2).sum() + 0.5 * (D_B * (b2 - T_B) ** 2).sum()).backward()
        theirs.step()
        assert torch.allclose(w.detach(), w2.detach(), rtol=1e-12, atol=1e-15)
        assert torch.allclose(b.detach(), b2.detach(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("numel, wanted, k", [(12, 0, 3), (10, 0, 2), (7, 3, 1), (64, 0, 8),
                                              (6, 4, 3), (5, 9, 5)])
def test_chunk_size_is_a_divisor_at_or_below_the_wanted_size(numel, wanted, k):
    assert chunk_size(numel, wanted) == k


def test_runs_through_the_logreg_loop():
    logged = []
    out = LogReg().run(
        LogReg.Params(n_samples=64, dim=5),
        {"step_size": method("subset_norm", lr=0.1),
         "batch_size": registry.get("batch_size", "constant")()},
        seed=0, device=torch.device("cpu"), budget=Budget(steps=20),
        log=lambda step, metrics: logged.append(metrics),
    )
    assert out["steps"] == 20 and math.isfinite(out["train/loss"])
    assert out["train/loss"] < logged[0]["train/loss"]
    assert all(m["method/step_size"] == 0.1 for m in logged[1:])
