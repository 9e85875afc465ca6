"""A loop's settings model is built from a task's flat parameters in one call: every knob of
the loop is a flat key of the task, nested groups are filled from the same keys."""

from __future__ import annotations

import pytest

from workbench.testbeds import get_task
from workbench.testbeds.control.loop import LoopSettings
from workbench.testbeds.control.ppo import PPOSettings
from workbench.testbeds.rlvr.loop import RLSettings
from workbench.testbeds.value.loop import DQNSettings


def test_control_settings_nest_the_ppo_knobs_given_as_flat_keys():
    params = get_task("cartpole").Params.model_validate(
        {"num_envs": 4, "batch_axis": "num_envs", "epochs": 2, "clip": 0.1})
    settings = LoopSettings.from_flat(params)
    assert (settings.num_envs, settings.batch_axis) == (4, "num_envs")
    assert settings.ppo == PPOSettings(epochs=2, clip=0.1)


@pytest.mark.parametrize("task, settings", [("control", LoopSettings),
                                            ("rlvr-countdown", RLSettings),
                                            ("dqn-cartpole", DQNSettings)])
def test_every_knob_of_the_loop_is_a_flat_key_of_the_task(task, settings):
    keys = set(get_task(task).Params.model_fields)
    leaves = set(settings.model_fields) - {"ppo"} | (
        set(PPOSettings.model_fields) if settings is LoopSettings else set())
    assert leaves <= keys


def test_an_override_replaces_the_task_reading_and_an_unknown_one_is_refused():
    params = get_task("rlvr-arith").Params.model_validate({"kl_coef": 0.05})
    settings = RLSettings.from_flat(params, max_new_tokens=params.max_new_tokens or 9)
    assert (settings.kl_coef, settings.max_new_tokens) == (0.05, 9)
    with pytest.raises(TypeError, match="no field"):
        RLSettings.from_flat(params, max_new_tokens=9, nonsense=1)
