"""SMB: stochastic model building, a line search that corrects the step and its direction.

Each step, on the step's minibatch, with g the gradient at x_k:

1. trial point x+ = x_k + s, s = -lr g; evaluate f(x+) (one loss evaluation);
2. if f(x+) <= f(x_k) - c lr ||g||^2 (Armijo), accept x_{k+1} = x+;
3. else evaluate the gradient g+ at x+ (one gradient evaluation) and, for every parameter
   tensor p on its own (the paper's "parameter groups": s, g, y restricted to p), with
   y = g+ - g, take the step of the model built from (s, y):

       sigma   = 1/2 ( ||s|| (||y|| + ||g|| / eta) - s.y )
       theta   = (s.y + 2 sigma)^2 - ||s||^2 ||y||^2
       c_g     = -||s||^2 / (2 sigma)
       c_s     = c_g / theta * ( -(s.y + 2 sigma) y.g + ||y||^2 s.g )
       c_y     = c_g / theta * ( -(s.y + 2 sigma) s.g + ||s||^2 y.g )
       x_{k+1} = x_k + c_s s + c_g g + c_y y          (on p)

   The model step changes the direction as well as the length, tensor by tensor (the
   "diagonalisation" of the paper). sigma > 0 and theta > 0 whenever g restricted to p is
   non-zero (Cauchy-Schwarz); a tensor whose gradient is exactly zero takes no model step here
   (the reference divides 0 by 0 there).

Where ||g|| < 1e-8 the trial step is kept whatever the test says, as in the reference.
``autoschedule`` (off by default, as in the reference) adapts lr once per window of b steps (b
the task's batches per epoch): lr <- beta lr if more than a fraction gamma of the window's
steps took the model step, else lr <- lr / beta unless that exceeds lr_max.

Costs: one gradient and one loss evaluation per step, one more gradient evaluation on a model
step (counted by the task). ``last_step_size`` is ||x_{k+1} - x_k|| / ||g||: lr on an accepted
trial, the model step's length per unit gradient otherwise (it may exceed lr; no cap). The
gradient left in ``.grad`` is the step's g (the reference leaves g+ after a model step), so the
task's ``train/grad_norm`` is the same quantity for every method. The reference's SMBi variant
(``independent_batch``: the model step taken on the next minibatch) is left out.

Reference: Birbil, Martin, Onay & Öztoprak, "Stochastic model building (SMB) algorithm for
learning" (arXiv 2111.07058; TOP, 2024); implementation github.com/sibirbil/SMB
(``source/smbsolve/smb.py``, ``SMB`` with ``independent_batch=False``, commit 17fb8ba; defaults
lr 1, eta 0.99, c 0.1, gamma 0.05, beta 0.9, lr_max 20). Reference-checked: tests/test_smb.py
compares six steps (iterates, float64, a logistic regression with a bias tensor and a split
quadratic; accepted and model steps; autoschedule down and up) with that optimizer's.
"""

from __future__ import annotations

import torch

from workbench.families import StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Bool, Float
from workbench.registry import Reference, register

_SMALLEST_GRAD_NORM = 1e-8  # the reference keeps the trial step below this gradient norm


class SMBOptimizer(FlatOptimizer):
    def __init__(self, params, *, lr, eta, c, autoschedule, gamma, beta, lr_max, batches,
                 seeds=None):
        defaults = {"lr": lr, "eta": eta, "c": c, "autoschedule": autoschedule,
                    "gamma": gamma, "beta": beta, "lr_max": lr_max, "batches": batches,
                    "window": 0, "model_steps": 0}
        super().__init__(params, defaults)
        self.seeds = seeds

    def _dot(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """<a, b> over one parameter tensor, per seed (float64)."""
        return self._sum_per_seed([a * b])

    def _model_step(self, s, g, g_plus, eta):
        """The model's step on one parameter tensor from s = -lr g, g and g+."""
        y = g_plus - g
        sg, sgp = self._dot(s, g), self._dot(s, g_plus)
        ys = sgp - sg
        ss, yy, yg, gg = self._dot(s, s), self._dot(y, y), self._dot(y, g), self._dot(g, g)
        sigma = 0.5 * (ss.sqrt() * (yy.sqrt() + gg.sqrt() / eta) - ys)
        theta = (ys + 2.0 * sigma) ** 2 - ss * yy
        moved = ss > 0
        sigma, theta = torch.where(moved, sigma, 1.0), torch.where(moved, theta, 1.0)
        c_g = torch.where(moved, -ss / (2.0 * sigma), 0.0)
        c_s = c_g / theta * (-(ys + 2.0 * sigma) * yg + yy * sg)
        c_y = c_g / theta * (-(ys + 2.0 * sigma) * sg + ss * yg)
        return (s * self._on_param(c_s, s) + g * self._on_param(c_g, g)
                + y * self._on_param(c_y, y))

    def step(self, closure):
        group = self.param_groups[0]
        loss = closure()
        f0 = loss.detach().double()
        origin, grads = self._snapshot(), self._grads()
        grad_sq = self._sq_per_seed(grads)
        lr = self._as_seed_scalar(group["lr"])
        trials = [-g * self._on_param(lr, g) for g in grads]
        self._set([x + s for x, s in zip(origin, trials, strict=True)])
        f_trial = closure(backward=False).detach().double()
        model = (grad_sq.sqrt() >= _SMALLEST_GRAD_NORM) & (f_trial > f0 - group["c"] * lr
                                                           * grad_sq)
        size = lr
        if bool(model.any()):
            if self.seeds is None:
                closure()
            else:
                closure(active=model)
            with torch.no_grad():
                steps = [self._model_step(s, g, g_plus, group["eta"]) for s, g, g_plus
                         in zip(trials, grads, self._live_grads(), strict=True)]
                length = self._sq_per_seed(steps).sqrt() / grad_sq.sqrt()
                for p, x, step, trial in zip(self._params(), origin, steps, trials,
                                             strict=True):
                    p.copy_(self._where_per_seed(model, x + step, x + trial))
                size = torch.where(model, length, lr)
            for p, g in zip(self._params(), grads, strict=True):  # .grad: the step's own g
                p.grad.copy_(g)
        self._report(size)
        if group["autoschedule"]:
            self._schedule(group, lr, model)
        return loss

    def _schedule(self, group, lr, model) -> None:
        """The reference's autoschedule: one lr update per window of ``batches`` steps."""
        count = self._as_seed_scalar(group["model_steps"]) + model.double()
        window = group["window"] + 1
        if window >= group["batches"]:
            shrink = count / window > group["gamma"]
            grow = ~shrink & (lr / group["beta"] <= group["lr_max"])
            lr = torch.where(shrink, lr * group["beta"], torch.where(grow, lr / group["beta"],
                                                                       lr))
            group["lr"] = self._kept(lr)
            window, count = 0, torch.zeros_like(count)
        group["window"], group["model_steps"] = window, self._kept(count)


@register
class SMB(StepSizeMethod):
    name = "smb"
    hyperparameters = {
        "lr": Float(1.0, low=1e-3, high=10.0, log=True, minimum=1e-30,
                    help="trial step size (and the model's s = -lr g)"),
        "eta": Float(0.99, minimum=1e-12, maximum=1.0,
                     help="model regularisation: sigma grows with ||g|| / eta"),
        "c": Float(0.1, low=0.01, high=0.5, log=True, minimum=0.0, maximum=1.0,
                   help="Armijo constant of the trial test"),
        "autoschedule": Bool(False, help="adapt lr once per epoch from the model-step rate"),
        "gamma": Float(0.05, minimum=0.0, maximum=1.0,
                       help="autoschedule: model-step rate above which lr shrinks"),
        "beta": Float(0.9, minimum=1e-6, maximum=1.0, help="autoschedule: lr factor"),
        "lr_max": Float(20.0, minimum=1e-30, help="autoschedule: lr grows no further"),
    }
    requires = frozenset({"closure"})
    reference = Reference(
        "Birbil, Martin, Onay & Öztoprak, Stochastic model building (SMB) algorithm for "
        "learning", 2021, "github.com/sibirbil/SMB",
    )
    fidelity = "reference-checked"
    vectorised = True

    def build(self, params, info):
        return SMBOptimizer(
            params, lr=self.hp.lr, eta=self.hp.eta, c=self.hp.c,
            autoschedule=self.hp.autoschedule, gamma=self.hp.gamma, beta=self.hp.beta,
            lr_max=self.hp.lr_max, batches=info.get("batches_per_epoch", 1),
            seeds=info.get("seeds"),
        )
