import subprocess
import sys
import textwrap

import pytest

from workbench import registry
from workbench.families import StepSizeMethod
from workbench.hyperparams import Float, HyperparameterError
from workbench.registry import Reference, RegistryError, register


def test_builtin_step_size_methods_are_registered():
    assert {"constant", "polyak", "armijo"} <= set(registry.available("step_size"))
    assert "step_size/armijo" in registry.available()
    cls = registry.get("step_size", "polyak")
    assert cls.family == "step_size" and cls.name == "polyak"
    assert cls.fidelity in registry.FIDELITIES
    assert cls.reference.year == 2021


def test_unknown_names_list_what_is_allowed():
    allowed = ", ".join(registry.available("step_size"))
    assert "armijo, constant" in allowed
    with pytest.raises(RegistryError, match=f"allowed: {allowed}$"):
        registry.get("step_size", "adamw")
    with pytest.raises(RegistryError, match="unknown family 'lr'"):
        registry.get("lr", "constant")


def test_constructor_resolves_and_validates_hyperparameters():
    method = registry.get("step_size", "constant")(lr=0.5)
    assert method.params == {"lr": 0.5, "momentum": 0.0}
    with pytest.raises(HyperparameterError, match="no hyperparameter 'rate'"):
        registry.get("step_size", "constant")(rate=0.5)
    with pytest.raises(HyperparameterError, match="outside"):
        registry.get("step_size", "constant")(lr=-1.0)


@pytest.mark.parametrize(
    "attrs, message",
    [
        ({"family": "optimizer"}, "family"),
        ({"fidelity": "exact"}, "fidelity"),
        ({"reference": "a paper"}, "Reference"),
        ({"hyperparameters": {"lr": Float(-1.0, minimum=0.0)}}, "lr"),
    ],
)
def test_register_refuses_malformed_declarations(attrs, message):
    body = {"name": "broken", "family": "step_size", "fidelity": "reconstructed",
            "reference": Reference("x", 2020), "hyperparameters": {}}
    body.update(attrs)
    cls = type("Broken", (StepSizeMethod,), body)
    with pytest.raises(RegistryError, match=message):
        register(cls)


def test_entry_point_plugins_are_discovered(tmp_path):
    """A method in another installed distribution registers through `workbench.methods`."""
    (tmp_path / "wb_plugin_demo.py").write_text(textwrap.dedent('''
        from workbench.families import StepSizeMethod
        from workbench.registry import Reference, register
        from methods.step_size.constant import _SGD

        @register
        class Halved(StepSizeMethod):
            name = "halved_demo"
            reference = Reference("demo", 2026)
            fidelity = "reconstructed"
            def build(self, params, info):
                return _SGD(params, lr=0.05)
    '''))
    dist = tmp_path / "wb_plugin_demo-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: wb-plugin-demo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[workbench.methods]\nhalved = wb_plugin_demo\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from workbench import registry; "
            "print(registry.available('step_size'))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, check=True).stdout
    assert "halved_demo" in out and "constant" in out
