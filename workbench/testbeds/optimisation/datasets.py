"""Small data sets for the supervised testbeds, drawn or loaded on the CPU.

Binary sets return ``(x, y)`` with features ``x`` of shape (n, d) and labels ``y`` in
{-1, +1}; generated ones are seeded. Loaded ones come from scikit-learn's bundled copies (no
download) and are standardised per feature (a constant feature stays 0).
"""

from __future__ import annotations

import torch

from workbench.common import seeds

Pair = tuple[torch.Tensor, torch.Tensor]


def gaussian(n_samples: int, dim: int, margin: float, label_noise: float, seed: int,
             dtype: torch.dtype = torch.float64) -> Pair:
    """x ~ N(0, I_d); y = sign(<x, w*>) for a random unit w*, flipped with probability
    ``label_noise``; every point pushed ``margin`` away from the boundary along y w*."""
    gen = seeds.torch_generator(seed, "data")
    w_star = torch.randn(dim, generator=gen, dtype=dtype)
    w_star /= w_star.norm()
    x = torch.randn(n_samples, dim, generator=gen, dtype=dtype)
    y = torch.sign(x @ w_star)
    y[y == 0] = 1.0
    flips = torch.rand(n_samples, generator=gen, dtype=dtype) < label_noise
    x += margin * y[:, None] * w_star[None, :]
    y[flips] *= -1.0
    return x, y


def tyurin_two_point(dtype: torch.dtype = torch.float64) -> Pair:
    """The data set of Theorem 4.1 in Tyurin (2024), "From logistic regression to the
    perceptron algorithm" (arXiv 2412.08424): a = (1, -1) labelled +1 and a = (-1, -4)
    labelled -1. From theta_0 = 0, GD with a large step gamma has a huge loss after one step
    (theta_1 = gamma (1/2, 3/4)) yet separates the data after two."""
    x = torch.tensor([[1.0, -1.0], [-1.0, -4.0]], dtype=dtype)
    y = torch.tensor([1.0, -1.0], dtype=dtype)
    return x, y


def tyurin_worst_case(n_samples: int, dtype: torch.dtype = torch.float64) -> Pair:
    """The data set of Theorem 5.1 in Tyurin (2024): one point (0.5, -1) labelled +1 and
    n - 1 points (-0.5, -1) labelled -1. Batch perceptron (GD with gamma -> inf) from 0 needs
    Omega(n) steps to separate it."""
    x = torch.tensor([[-0.5, -1.0]], dtype=dtype).repeat(n_samples, 1)
    x[0, 0] = 0.5
    y = -torch.ones(n_samples, dtype=dtype)
    y[0] = 1.0
    return x, y


def standardise(x: torch.Tensor, reference: torch.Tensor | None = None) -> torch.Tensor:
    """(x - mean) / std per feature, with mean and std taken from ``reference`` (default x);
    a feature with zero spread is only centred."""
    ref = x if reference is None else reference
    mean, std = ref.mean(dim=0), ref.std(dim=0)
    return (x - mean) / torch.where(std > 0, std, torch.ones_like(std))


def breast_cancer(dtype: torch.dtype = torch.float64) -> Pair:
    """Wisconsin breast cancer (569 x 30), standardised; benign +1, malignant -1."""
    from sklearn.datasets import load_breast_cancer

    bunch = load_breast_cancer()
    x = standardise(torch.as_tensor(bunch.data, dtype=torch.float64))
    y = 2.0 * torch.as_tensor(bunch.target, dtype=torch.float64) - 1.0
    return x.to(dtype), y.to(dtype)


def digits(dtype: torch.dtype = torch.float32) -> Pair:
    """Handwritten digits (1797 x 64 pixels in 0..16, unscaled) and class labels 0..9 (int64)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return (torch.as_tensor(bunch.data, dtype=torch.float64).to(dtype),
            torch.as_tensor(bunch.target, dtype=torch.int64))


def digits_binary(classes: tuple[int, int] = (0, 1), dtype: torch.dtype = torch.float64) -> Pair:
    """Two digit classes, standardised; ``classes[0]`` is labelled +1, ``classes[1]`` -1."""
    x, labels = digits(torch.float64)
    keep = (labels == classes[0]) | (labels == classes[1])
    x = standardise(x[keep])
    y = torch.where(labels[keep] == classes[0], 1.0, -1.0).to(torch.float64)
    return x.to(dtype), y.to(dtype)
