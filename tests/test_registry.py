import copy
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch

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


def test_hyperparameters_are_read_through_hp_and_each_read_is_recorded():
    method = registry.get("step_size", "constant")(lr=0.5)
    assert method.hyperparameters_read() == frozenset()
    assert method.hp.lr == 0.5
    assert method.hyperparameters_read() == {"lr"}
    with pytest.raises(AttributeError, match=r"^step_size/constant has no hyperparameter 'rate'; "
                                             r"allowed: lr, momentum$"):
        method.hp.rate  # noqa: B018
    with pytest.raises(AttributeError):
        method.lr  # noqa: B018 - no longer an attribute of the method itself
    with pytest.raises(AttributeError, match="read-only"):
        method.hp.lr = 1.0
    assert method.hyperparameters_read() == {"lr"}
    for copied in (copy.deepcopy(method), pickle.loads(pickle.dumps(method))):
        assert copied.hp.lr == 0.5 and copied.params == method.params


def test_hyperparameters_may_share_a_name_with_the_methods_own_attributes(tmp_path,
                                                                          monkeypatch):
    """``params``, ``read`` and ``hp`` are ordinary hyperparameter names."""
    (tmp_path / "wb_hp_names_demo.py").write_text(textwrap.dedent('''
        from workbench.families import StepSizeMethod
        from workbench.hyperparams import Float, Int
        from workbench.registry import Reference, register
        from methods.step_size.constant import _SGD

        @register
        class Named(StepSizeMethod):
            name = "hp_names_demo"
            hyperparameters = {"params": Float(0.25, minimum=0.0), "read": Int(3, minimum=0),
                               "hp": Float(0.5, minimum=0.0)}
            reference = Reference("demo", 2026)
            fidelity = "reconstructed"

            def build(self, params, info):
                return _SGD(params, lr=self.hp.params * self.hp.read * self.hp.hp)
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import wb_hp_names_demo

        method = wb_hp_names_demo.Named(read=4)
        assert (method.hp.params, method.hp.read, method.hp.hp) == (0.25, 4, 0.5)
        assert method.params == {"params": 0.25, "read": 4, "hp": 0.5}
        assert registry.get("step_size", "hp_names_demo") is wb_hp_names_demo.Named
        fresh = wb_hp_names_demo.Named(params=0.5)
        assert fresh.hyperparameters_read() == frozenset()
        optimizer = fresh.build([torch.zeros(2, requires_grad=True)], {})
        assert optimizer.param_groups[0]["lr"] == 0.5 * 3 * 0.5
        assert fresh.hyperparameters_read() == {"params", "read", "hp"}
    finally:
        registry.forget_module("wb_hp_names_demo")
    assert "hp_names_demo" not in registry.available("step_size")


def test_register_refuses_a_hyperparameter_name_that_hp_cannot_read():
    for name in ("_private", "two words"):
        cls = type("Unreadable", (StepSizeMethod,), {
            "name": "unreadable", "family": "step_size", "fidelity": "reconstructed",
            "reference": Reference("x", 2020), "hyperparameters": {name: Float(0.1)}})
        with pytest.raises(RegistryError, match="identifier not starting with '_'"):
            register(cls)
