"""AEGD against the iterates of its reference implementation (github.com/txping/AEGD)."""

import math

import pytest
import torch

from tests.one_tensor import one_tensor
from workbench import registry

A = torch.tensor([[1.0, -2.0, 0.5], [0.3, 0.8, -1.2], [-1.5, 0.2, 0.7], [2.0, 1.0, 1.0],
                  [-0.4, -0.9, 0.1]], dtype=torch.float64)
Y = torch.tensor([1.0, -1.0, 1.0, 1.0, -1.0], dtype=torch.float64)
H = torch.tensor([1.0, 10.0, 100.0], dtype=torch.float64)


def logistic(x):
    return torch.nn.functional.softplus(-Y * (A @ x)).mean()


def quadratic(x):
    return 0.5 * (H * x * x).sum()


# How near the reference's numbers (here and in test_alr_smag, test_smb) ours must be. They
# were printed on another machine by the reference's code, which does the same float64
# arithmetic in another order: ours differ by up to 6e-13 relative (SMB's shrinking quadratic
# iterates, 3.5e-13 on AEGD's), and another CPU's kernels move the last bits again. 1e-10
# relative leaves a hundredfold margin over that and still fails a wrong formula, which moves
# an iterate by far more than 1e-6; the absolute part (some thousand float64 eps at the
# iterates' scale of 1) is for components near zero, where relative error means nothing.
REFERENCE_TOL = {"rel": 1e-10, "abs": 1e-13}

# The reference's AEGD (aegd.py at the repository's head, torch float64), six steps from x0,
# run with the same closures; its iterates, printed with repr.
REFERENCE = {
    "logistic": (logistic, [0.1, -0.2, 0.3], 0.5, 1.0, [
        (0.15535201756784306, -0.19771783406269508, 0.4329986103388447),
        (0.19814141747067726, -0.1937615572618731, 0.5552311175444732),
        (0.23120188866481228, -0.18839581179411838, 0.6681397461098217),
        (0.2568283074426413, -0.18182486400533704, 0.7729760236458632),
        (0.2768099522991948, -0.17423063765594354, 0.8707907398322072),
        (0.2925185287850509, -0.16578163005836025, 0.9624571152167307)]),
    "quadratic, lr past 2/L": (quadratic, [1.0, 1.0, 1.0], 0.3, 0.5, [
        (0.7008014247551202, -1.3661971830985915, -0.07969151670951183),
        (0.21756736684733252, 0.6653670365394554, 0.024517202431173966),
        (-0.07246092729788345, 0.10129687466151416, -0.022350649337581557),
        (0.13844193527181356, -0.04702332065785335, 0.018364056303469316),
        (-0.27751152083154584, 0.02027865591611945, 0.00047899062879751606),
        (0.5365124884448973, -0.008335978964734439, 1.411730193353661e-05)]),
}


def stepper(f, x0, **params):
    return one_tensor("aegd", f, x0, {"loss_lower_bound": 0.0}, **params)


@pytest.mark.parametrize("case", list(REFERENCE))
def test_six_steps_match_the_reference_iterates(case):
    f, x0, lr, c, expected = REFERENCE[case]
    x, optimizer, closure = stepper(f, x0, lr=lr, c=c)
    for row in expected:
        optimizer.step(closure)
        assert x.detach().tolist() == pytest.approx(row, **REFERENCE_TOL)


def test_the_energy_never_grows_and_the_reported_step_is_its_mean_effective_step():
    x, optimizer, closure = stepper(quadratic, [1.0, 1.0, 1.0], lr=0.3, c=0.5)
    previous = torch.full((3,), math.sqrt(quadratic(x.detach()).item() + 0.5),
                          dtype=torch.float64)
    for _ in range(6):
        loss = quadratic(x.detach()).item()
        optimizer.step(closure)
        r = optimizer.state[x]["r"]
        assert bool((r <= previous).all())
        assert optimizer.last_step_size == pytest.approx(
            0.3 * float(r.mean()) / math.sqrt(loss + 0.5), rel=1e-12)
        previous = r.clone()


def test_a_loss_at_or_below_minus_c_stops_with_a_clear_error():
    x, optimizer, closure = stepper(lambda x: -5.0 + (x * x).sum(), [1.0, 0.0, 0.0], c=1.0,
                                    shift="c")
    with pytest.raises(ValueError, match=r"aegd: c=1.0 does not make f\(x\) - f_lb \+ c > 0"):
        optimizer.step(closure)


def test_shifting_by_the_lower_bound_is_aegd_on_the_shifted_loss():
    """f_lb = -5: the iterates of the plain method on f + 5; shift: c asks for no bound."""
    x = torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64, requires_grad=True)
    method = registry.get("step_size", "aegd")(lr=0.3, c=0.5)
    assert method.requirements(method.params) == {"loss_lower_bound"}
    plain = registry.get("step_size", "aegd")(shift="c")
    assert plain.requirements(plain.params) == frozenset()
    optimizer = method.build([x], {"loss_lower_bound": -5.0})

    def closure():
        optimizer.zero_grad()
        loss = -5.0 + quadratic(x)
        loss.backward()
        return loss
    for row in REFERENCE["quadratic, lr past 2/L"][4]:
        optimizer.step(closure)
        assert x.detach().tolist() == pytest.approx(row, **REFERENCE_TOL)


def test_it_is_registered_as_reference_checked_and_vectorised():
    cls = registry.get("step_size", "aegd")
    assert cls.fidelity == "reference-checked" and cls.vectorised
    assert cls.reference.implementation == "github.com/txping/AEGD"
