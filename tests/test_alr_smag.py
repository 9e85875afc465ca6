"""ALR-SMAG against the iterates and step sizes of its reference (fabian-sp/step-back)."""

import pytest

from tests.one_tensor import one_tensor
from tests.test_aegd import REFERENCE_TOL, logistic, quadratic
from workbench import registry

# The reference's AlrSmag (stepback/optim/alr_smag.py, commit 94f055b; torch float64), six steps
# from x0 with the same closures and lb = 0: its iterates and min(lr, its step_size_list entry),
# held to REFERENCE_TOL (test_aegd says why).
REFERENCE = {
    "logistic": (logistic, [0.1, -0.2, 0.3], {"lr": 5.0, "beta": 0.9, "c": 1.0}, [
        ((0.6545953597258504, -0.17717826556127342, 1.6451848556244488), 5.0),
        ((0.7713232176494998, -0.041827533104853744, 2.5722343132143894), 2.6236287434489154),
        ((0.7720413690996951, 0.12683356570711748, 3.2024859868896955), 1.645214381501922),
        ((0.7552815228204546, 0.3046874203170981, 3.6914984770854677), 1.2563924003447786),
        ((0.7489915539151933, 0.4833260113595313, 4.106858588252549), 1.081872266013099),
        ((0.7642309588534234, 0.6574056264939787, 4.4829095342140235), 1.0066591729597871)]),
    "quadratic": (quadratic, [1.0, 1.0, 1.0], {"lr": 1.0, "beta": 0.5, "c": 0.5}, [
        ((0.989010989010989, 0.8901098901098901, -0.098901098901099), 0.01098901098901099),
        ((0.9808579005992226, 0.813994341468676, -0.3185230376682385), 0.005475505870632794),
        ((0.8981359839730658, 0.09048618302074453, 0.24709700883429725), 0.04794463407584709),
        ((0.8693854859643686, -0.04748654597478391, -0.06004792879442146),
         0.016327924412816112),
        ((0.7999222924087197, -0.19636123232567526, -0.19504935211446733), 0.03969791906090871),
        ((0.774629064784388, -0.19502442817221635, 0.07383646646256177), 0.015102062217607196)]),
}


def stepper(f, x0, lower_bound=0.0, **params):
    return one_tensor("alr_smag", f, x0, {"loss_lower_bound": lower_bound}, **params)


@pytest.mark.parametrize("case", list(REFERENCE))
def test_six_steps_match_the_reference(case):
    f, x0, params, expected = REFERENCE[case]
    x, optimizer, closure = stepper(f, x0, **params)
    for row, tau in expected:
        optimizer.step(closure)
        assert x.detach().tolist() == pytest.approx(row, **REFERENCE_TOL)
        assert optimizer.last_step_size == pytest.approx(tau, **REFERENCE_TOL)
        assert optimizer.last_step_size <= params["lr"]


def test_the_lower_bound_is_the_tasks():
    """f_lb = -5 on f - 5 gives the iterates of f_lb = 0 on f."""
    f, x0, params, expected = REFERENCE["quadratic"]
    x, optimizer, closure = stepper(lambda x: f(x) - 5.0, x0, lower_bound=-5.0, **params)
    for row, _ in expected:
        optimizer.step(closure)
        assert x.detach().tolist() == pytest.approx(row, **REFERENCE_TOL)


def test_a_zero_direction_moves_nothing():
    x, optimizer, closure = stepper(quadratic, [0.0, 0.0, 0.0], lr=0.7)
    optimizer.step(closure)
    assert x.detach().tolist() == [0.0, 0.0, 0.0]
    assert optimizer.last_step_size == 0.7


def test_it_declares_what_it_reads_and_its_cap():
    cls = registry.get("step_size", "alr_smag")
    assert cls.requires == {"loss_lower_bound"}
    assert cls(lr=3.0).step_size_cap() == 3.0
    assert cls.fidelity == "reference-checked" and cls.vectorised
