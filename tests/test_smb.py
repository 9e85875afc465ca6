"""SMB against the iterates of its reference implementation (github.com/sibirbil/SMB)."""

import math

import pytest
import torch

from tests.test_aegd import REFERENCE_TOL, A, H, Y
from workbench import registry


def logistic(w, b):
    return torch.nn.functional.softplus(-Y * (A @ w + b)).mean()


def quadratic(u, v):
    x = torch.cat([u, v])
    return 0.5 * (H * x * x).sum()


LOGISTIC_START = ([0.1, -0.2, 0.3], [0.05])
QUADRATIC_START = ([1.0, 1.0], [1.0])

# The reference's SMB (source/smbsolve/smb.py at commit 17fb8ba, independent_batch=False; torch
# float64), six steps from the start with the same closures (two parameter tensors, so two
# per-tensor models): its iterates (held to REFERENCE_TOL: test_aegd says why), whether the
# step was a model step, and its lr after it.
REFERENCE = {
    "logistic, model and trial steps": (logistic, LOGISTIC_START, {"lr": 20.0, "eta": 0.9,
                                                                   "c": 0.3}, [
        (([0.8637155276297828, 0.5822680586636027, 2.0847200943590503],
          [0.2080101279990396]), True, 20.0),
        (([0.8416829368941763, 0.7178326597676987, 2.9179363439227544],
          [0.23342771688801173]), True, 20.0),
        (([0.9446755802030126, 0.8406233405559843, 3.4810815007148324],
          [0.2361856217426079]), True, 20.0),
        (([1.0455148451930116, 0.9579665285659903, 3.949457452297111],
          [0.2364386905151439]), True, 20.0),
        (([1.4044573046007953, 0.5679340551847227, 4.842333176281743],
          [0.22805572030056695]), False, 20.0),
        (([1.4702330405945914, 0.6858818062220315, 5.169832578411075],
          [0.13768245243267754]), True, 20.0)]),
    "quadratic, lr past 2/L: model steps": (quadratic, QUADRATIC_START, {"lr": 0.3}, [
        (([0.8427758498762435, 0.576509891905334], [0.5082781456953531]), True, 0.3),
        (([0.7102362221165448, 0.3352694045550652], [0.2583466733915321]), True, 0.3),
        (([0.5984803708388263, 0.1984304687527513], [0.1313119680980147]), True, 0.3),
        (([0.5042121054829269, 0.12136412918621067], [0.06674300365246824]), True, 0.3),
        (([0.42465268380321786, 0.07831746040180199], [0.033924010134617724]), True, 0.3),
        (([0.35748181237612325, 0.05424385377340874], [0.017242832965776923]), True, 0.3)]),
    "autoschedule shrinks lr": (quadratic, QUADRATIC_START, {
        "lr": 0.3, "autoschedule": True, "gamma": 0.4, "beta": 0.5, "lr_max": 1.0}, [
        (([0.8427758498762435, 0.576509891905334], [0.5082781456953531]), True, 0.3),
        (([0.7102362221165448, 0.3352694045550652], [0.2583466733915321]), True, 0.15),
        (([0.6480103752445423, 0.2118785324203038], [0.1333809372395997]), True, 0.15),
        (([0.5910904548572351, 0.13523626406410547], [0.06886279658787053]), True, 0.075),
        (([0.5612353437097253, 0.09533890672719895], [0.036603726262006905]), True, 0.075),
        (([0.5326246415725586, 0.06746703688734561], [0.019456554811192905]), True, 0.0375)]),
    "autoschedule grows lr up to lr_max": (logistic, LOGISTIC_START, {
        "lr": 5.0, "autoschedule": True, "gamma": 0.05, "beta": 0.5, "lr_max": 12.0}, [
        (([0.6392057597635986, -0.16783206992057095, 1.6316547742255754],
          [0.33118158688741384]), False, 5.0),
        (([0.44838319534664, 0.1375535208774399, 2.143939937089744],
          [0.09588275466747029]), False, 10.0),
        (([0.5164965608282119, 0.24080580312779887, 2.946373055748541],
          [-0.05673385693913273]), False, 10.0),
        (([0.6447761288258449, 0.3561082499825002, 3.4708544905779615],
          [-0.1937024364945098]), False, 10.0),
        (([0.7278285686555002, 0.38760543300497413, 3.931600472041615],
          [-0.222710046961102]), False, 10.0),
        (([0.8134177537155706, 0.5206334203078082, 4.29840883944968],
          [-0.3380092767078038]), False, 10.0)]),
}


def stepper(f, start, batches=2, **params):
    xs = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in start]
    optimizer = registry.get("step_size", "smb")(**params).build(
        xs, {"batches_per_epoch": batches})
    counts = {"grad": 0, "loss": 0}

    def closure(backward=True):
        if not backward:
            counts["loss"] += 1
            with torch.no_grad():
                return f(*xs)
        counts["grad"] += 1
        optimizer.zero_grad()
        loss = f(*xs)
        loss.backward()
        return loss.detach()
    return xs, optimizer, closure, counts


def gradient(f, xs):
    at = [x.detach().clone().requires_grad_(True) for x in xs]
    f(*at).backward()
    return [x.grad for x in at]


@pytest.mark.parametrize("case", list(REFERENCE))
def test_six_steps_match_the_reference(case):
    f, start, params, expected = REFERENCE[case]
    xs, optimizer, closure, counts = stepper(f, start, **params)
    for (rows, model_step, lr_after) in expected:
        before = [x.detach().clone() for x in xs]
        g = gradient(f, xs)
        lr = optimizer.param_groups[0]["lr"]
        counts.update(grad=0, loss=0)
        optimizer.step(closure)
        for x, row in zip(xs, rows, strict=True):
            assert x.detach().tolist() == pytest.approx(row, **REFERENCE_TOL)
        # the costs: a trial loss, and a second gradient on a model step only
        assert counts == {"grad": 1 + model_step, "loss": 1}
        # the reported step: the step's length per unit gradient (lr on an accepted trial)
        moved = math.sqrt(sum(float(((x.detach() - b) ** 2).sum())
                              for x, b in zip(xs, before, strict=True)))
        norm = math.sqrt(sum(float((t * t).sum()) for t in g))
        assert optimizer.last_step_size == pytest.approx(moved / norm, rel=1e-10)
        if not model_step:
            assert optimizer.last_step_size == lr
        # .grad holds the step's gradient, not the trial point's
        for x, t in zip(xs, g, strict=True):
            assert x.grad.tolist() == pytest.approx(t.tolist(), rel=1e-12, abs=1e-15)
        assert optimizer.param_groups[0]["lr"] == pytest.approx(lr_after, rel=1e-15)


def test_the_model_step_solves_the_formula_by_hand_on_one_tensor():
    """One tensor, one step: c_s, c_g, c_y of the docstring, computed here in plain floats."""
    f = lambda x: 0.5 * (H * x * x).sum()  # noqa: E731
    x0, lr, eta = [1.0, 1.0, 1.0], 0.3, 0.99
    xs, optimizer, closure, _ = stepper(f, [x0], lr=lr, eta=eta)
    optimizer.step(closure)
    g = [h * x for h, x in zip(H.tolist(), x0, strict=True)]
    s = [-lr * v for v in g]
    y = [h * si for h, si in zip(H.tolist(), s, strict=True)]  # g+ - g = H s

    def dot(a, b):
        return sum(p * q for p, q in zip(a, b, strict=True))

    sy, ss, yy, yg, gg, sg = dot(s, y), dot(s, s), dot(y, y), dot(y, g), dot(g, g), dot(s, g)
    sigma = 0.5 * (math.sqrt(ss) * (math.sqrt(yy) + math.sqrt(gg) / eta) - sy)
    theta = (sy + 2 * sigma) ** 2 - ss * yy
    c_g = -ss / (2 * sigma)
    c_s = c_g / theta * (-(sy + 2 * sigma) * yg + yy * sg)
    c_y = c_g / theta * (-(sy + 2 * sigma) * sg + ss * yg)
    want = [x + c_s * a + c_g * b + c_y * c for x, a, b, c in zip(x0, s, g, y, strict=True)]
    assert xs[0].detach().tolist() == pytest.approx(want, rel=1e-12)
    assert f(xs[0].detach()) < f(torch.tensor(x0, dtype=torch.float64))


def test_a_tensor_with_a_zero_gradient_stays_where_the_reference_divides_by_zero():
    xs, optimizer, closure, _ = stepper(quadratic, ([0.0, 0.0], [1.0]), lr=0.3)
    optimizer.step(closure)  # 100 * 0.3 > 2: the trial fails, a model step on v only
    assert xs[0].detach().tolist() == [0.0, 0.0]  # the reference: [nan, nan]
    # v's model is its own: the reference's v (the quadratic case's first step)
    assert xs[1].detach().tolist() == pytest.approx([0.5082781456953531], **REFERENCE_TOL)


def test_it_is_registered_as_reference_checked_and_vectorised():
    cls = registry.get("step_size", "smb")
    assert cls.fidelity == "reference-checked" and cls.vectorised
    assert cls.requires == {"closure"}
    assert cls.reference.implementation == "github.com/sibirbil/SMB"
