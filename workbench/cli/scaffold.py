"""``workbench new-method FAMILY NAME``: a method file from the family's template, and its test.

Each template is a small working scheme (plain SGD, a constant batch, a constant entropy bonus,
group-normalised rewards) that already passes its family contract: replace its formula with
yours, keep the declarations honest (hyperparameters, search space, ``requires``, reference,
fidelity), then run the commands ``next_steps`` prints.
"""

from __future__ import annotations

import re
from pathlib import Path

HEADER = '''"""{title}: TODO one line on the scheme.

    TODO the update formula, e.g. x_{{k+1}} = x_k - lr * g_k

Reference: TODO authors, "title", venue year; implementation: TODO (or none).
Fidelity: reconstructed (from the paper's text) until a test checks it number for number
against the reference implementation; then say which test.
"""

from __future__ import annotations

'''

TEMPLATES = {
    "step_size": '''import torch

from workbench.families import StepSizeMethod
from workbench.hyperparams import Float
from workbench.families.optim import FlatOptimizer
from workbench.registry import Reference, register


class {cls}Optimizer(FlatOptimizer):
    def __init__(self, params, *, lr: float):
        super().__init__(params, {{"lr": lr}})

    def _update(self) -> None:  # runs after one closure() call, outside autograd
        step = self.param_groups[0]["lr"]  # TODO: your step-size rule
        self._descend(self._live_grads(), step)
        self.last_step_size = step


@register
class {cls}(StepSizeMethod):
    name = "{name}"
    hyperparameters = {{
        "lr": Float(0.1, low=1e-3, high=10.0, log=True, minimum=0.0, help="step size"),
    }}
    requires = frozenset()  # e.g. {{"closure"}} to re-evaluate the loss, {{"f_star"}}
    reference = Reference("TODO authors, title", 2026, "TODO implementation")
    fidelity = "reconstructed"

    def step_size_cap(self) -> float:
        return self.hp.lr  # the largest step this configuration may take (inf: none)

    def build(self, params, info):
        return {cls}Optimizer(params, lr=self.hp.lr)
''',
    "batch_size": '''from workbench.families import BatchSizeMethod
from workbench.hyperparams import Int
from workbench.registry import Reference, register


@register
class {cls}(BatchSizeMethod):
    name = "{name}"
    hyperparameters = {{
        "size": Int(32, low=8, high=256, log=True, minimum=1, help="batch size"),
        "min_size": Int(1, minimum=1),
        "max_size": Int(0, minimum=0, help="0: n_samples"),
    }}
    requires = frozenset()  # {{"per_sample_grads"}} for grad_var and the two-batch norms
    reference = Reference("TODO authors, title", 2026, "TODO implementation")
    fidelity = "reconstructed"

    def start(self, info) -> int:
        # reset all state here; hyperparameters are read as self.hp.NAME
        self.upper = min(self.hp.max_size or info["n_samples"], info["n_samples"])
        self.current = max(self.hp.min_size, min(self.hp.size, self.upper))
        return self.current

    def next_batch_size(self, step, stats) -> int:
        return self.current  # TODO: your rule, from stats (loss, grad_sq, grad_var, ...)
''',
    "entropy": '''from workbench.families import EntropyMethod
from workbench.hyperparams import Float
from workbench.registry import Reference, register


@register
class {cls}(EntropyMethod):
    name = "{name}"
    hyperparameters = {{
        "coef": Float(0.01, low=1e-4, high=0.1, log=True, minimum=0.0, help="entropy bonus"),
    }}
    requires = frozenset()
    reference = Reference("TODO authors, title", 2026, "TODO implementation")
    fidelity = "reconstructed"

    def coefficient_bounds(self) -> tuple[float, float]:
        return 0.0, self.hp.coef

    def coefficient(self, step: int, entropy: float) -> float:
        return self.hp.coef  # TODO: your schedule or controller
''',
    "advantage": '''import torch

from workbench.families import AdvantageMethod
from workbench.hyperparams import Float
from workbench.registry import Reference, register


@register
class {cls}(AdvantageMethod):
    name = "{name}"
    hyperparameters = {{
        "eps": Float(1e-6, minimum=0.0, help="added to the group std"),
    }}
    requires = frozenset({{"rewards", "mask", "group_ids"}})
    invariants = frozenset({{"zero_mean_per_group"}})
    reference = Reference("TODO authors, title", 2026, "TODO implementation")
    fidelity = "reconstructed"

    def compute(self, *, rewards, mask, group_ids, **_):
        """TODO: your estimator. Here: every valid step carries its sequence's total reward,
        centred and scaled within its group over the valid steps (each counts once), so the
        group's advantages average to 0. Padded steps get 0. Never modify the inputs."""
        valid = mask.to(rewards.dtype)
        score = (rewards * valid).sum(dim=1, keepdim=True) * valid
        advantages = torch.zeros_like(rewards)
        for group in group_ids.unique():
            rows = group_ids == group
            steps = score[rows][valid[rows] > 0]
            centred = (score[rows] - steps.mean()) * valid[rows]
            advantages[rows] = centred / (steps.std(unbiased=False) + self.hp.eps)
        return advantages, advantages
''',
}

TEST = '''"""{family}/{name}: its family contract, and its formula against hand-computed values."""

from workbench import families, registry


def test_{name}_passes_its_family_contract():
    assert families.check(registry.get("{family}", "{name}")) == []


def test_{name}_formula():
    method = registry.get("{family}", "{name}")()
    assert method.params  # TODO: check one or two steps of your formula by hand
'''


class ScaffoldError(ValueError):
    """A name or family that cannot be scaffolded, or a file that already exists."""


def class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def write(family: str, name: str, root: Path) -> tuple[Path, Path]:
    """Write ``methods/FAMILY/NAME.py`` and ``tests/test_method_NAME.py`` under ``root``."""
    if family not in TEMPLATES:
        raise ScaffoldError(f"unknown family {family!r}; allowed: {', '.join(TEMPLATES)}")
    if not re.fullmatch(r"[a-z][a-z0-9_]{1,40}", name):
        raise ScaffoldError(f"method name {name!r}: allowed: lower-case letters, digits and "
                            "underscores, starting with a letter (2-41 characters)")
    if not root.is_dir():
        raise ScaffoldError(f"--root {root}: not a folder; allowed: the root of a workbench "
                            "checkout")
    method_file = root / "methods" / family / f"{name}.py"
    test_file = root / "tests" / f"test_method_{name}.py"
    for path in (method_file, test_file):
        if path.exists():
            raise ScaffoldError(f"{path} already exists; choose another name")
    if not method_file.parent.is_dir():
        raise ScaffoldError(f"{method_file.parent} is not a folder: run this from the root of "
                            "a workbench checkout, or write an installable package with "
                            "--plugin DIR")
    installed = _installed_methods()
    if installed is not None and installed != (root / "methods").resolve():
        raise ScaffoldError(f"{root / 'methods'} is not the methods package this workbench "
                            f"imports ({installed}): `workbench check` and sweeps would not "
                            "find the method there. Run this from that checkout (or --root "
                            f"{installed.parent}), or write an installable package with "
                            "--plugin DIR")
    title = f"{family}/{name}"
    method_file.write_text(HEADER.format(title=title)
                           + TEMPLATES[family].format(cls=class_name(name), name=name))
    test_file.parent.mkdir(parents=True, exist_ok=True)
    test_file.write_text(TEST.format(family=family, name=name))
    return method_file, test_file


def _installed_methods() -> Path | None:
    """The folder of the ``methods`` package this interpreter imports, found without
    importing it."""
    import importlib.util

    spec = importlib.util.find_spec("methods")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]).resolve() if locations else None


PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{project}"
version = "0.1.0"
description = "{family}/{name}: a method for the workbench (TODO one line)"
requires-python = ">=3.11"
dependencies = ["workbench"]

# the workbench imports this module at start-up; its @register adds the method
[project.entry-points."workbench.methods"]
{name} = "{package}.{name}"

[tool.setuptools]
packages = ["{package}"]
"""


def write_plugin(family: str, name: str, folder: Path) -> tuple[Path, Path]:
    """An installable package in ``folder``: ``pyproject.toml`` with the ``workbench.methods``
    entry point, ``PACKAGE/NAME.py`` from the family's template and ``tests/test_NAME.py``
    (PACKAGE: the folder's name as an identifier). ``pip install -e FOLDER`` makes the method
    visible to ``workbench methods``, ``check`` and sweeps."""
    if family not in TEMPLATES:
        raise ScaffoldError(f"unknown family {family!r}; allowed: {', '.join(TEMPLATES)}")
    if not re.fullmatch(r"[a-z][a-z0-9_]{1,40}", name):
        raise ScaffoldError(f"method name {name!r}: allowed: lower-case letters, digits and "
                            "underscores, starting with a letter (2-41 characters)")
    package = re.sub(r"\W", "_", folder.resolve().name.lower()).strip("_")
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", package or "-") or package == "methods":
        raise ScaffoldError(f"--plugin {folder}: its name must make a Python package name "
                            "(letters, digits, _), and not 'methods'")
    if folder.exists() and not folder.is_dir():
        raise ScaffoldError(f"--plugin {folder}: not a folder; allowed: a new or empty folder")
    if folder.exists() and any(folder.iterdir()):
        raise ScaffoldError(f"--plugin {folder}: the folder exists and is not empty; name a "
                            "new one")
    method_file = folder / package / f"{name}.py"
    test_file = folder / "tests" / f"test_{name}.py"
    method_file.parent.mkdir(parents=True)
    test_file.parent.mkdir()
    (folder / "pyproject.toml").write_text(PYPROJECT.format(
        project=package.replace("_", "-"), family=family, name=name, package=package))
    (method_file.parent / "__init__.py").write_text(f'"""{package}: methods for the '
                                                    'workbench, registered on import."""\n')
    method_file.write_text(HEADER.format(title=f"{family}/{name}")
                           + TEMPLATES[family].format(cls=class_name(name), name=name))
    test_file.write_text(TEST.format(family=family, name=name))
    return method_file, test_file


def plugin_next_steps(family: str, name: str, folder: Path, method_file: Path,
                      test_file: Path) -> str:
    return (
        f"wrote {folder / 'pyproject.toml'}, {method_file} and {test_file}\n"
        "next:\n"
        f"  1. pip install -e {folder}      # into the workbench's environment\n"
        f"  2. put your formula and reference in {method_file}\n"
        f"  3. workbench check {family}/{name}\n"
        f"  4. python -m pytest {test_file}\n"
        f"  5. add `{name}` under methods.{family} in a sweep, then workbench sweep SPEC"
    )


def next_steps(family: str, name: str, method_file: Path, test_file: Path) -> str:
    return (
        f"wrote {method_file} and {test_file}\n"
        "next:\n"
        f"  1. put your formula and reference in {method_file}\n"
        f"  2. workbench check {family}/{name}          # the family contract, in plain words\n"
        f"  3. python -m pytest {test_file}\n"
        f"  4. workbench run logreg {family}={name} --steps 100   # try it once "
        "(step_size/batch_size)\n"
        f"  5. add `{name}` under methods.{family} in a sweep (e.g. sweeps/quickstart.yaml), then\n"
        "     workbench sweep SPEC && workbench report SPEC"
    )
