"""A step-size method built on one float64 tensor, for tests that follow its iterates."""

import torch

from workbench import registry


def one_tensor(method: str, f, x0, inputs: dict, **params):
    """(x, optimizer, closure): ``method`` built with ``params`` on x = ``x0`` with the step's
    ``inputs``; ``closure`` evaluates f(x) and its gradient."""
    x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    optimizer = registry.get("step_size", method)(**params).build([x], inputs)

    def closure():
        optimizer.zero_grad()
        loss = f(x)
        loss.backward()
        return loss
    return x, optimizer, closure
