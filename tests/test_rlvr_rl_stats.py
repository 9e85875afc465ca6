"""The RLVR loop gives a step-size method its RL statistics (``rl_stats``) after every
optimizer step, through the one policy update every RL loop uses (``policy_step``)."""

from __future__ import annotations

import json

import pytest

from workbench.cli import main as cli

TINY = ["hidden=32", "layers=1", "heads=2", "intermediate=64", "warmup_steps=30",
        "warmup_batch=16", "n_train=200", "n_eval=16", "eval_k_prompts=4", "eval_k=2",
        "prompts=2", "group_size=4", "digits_min=1", "digits_max=2", "format_reward=0.5",
        "warmup_target=null"]


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_workbench_run_rlvr_with_kl_adaptive_observes_every_step(capsys):
    """kl_adaptive with a KL target no step reaches multiplies its lr by ``factor`` at every
    ``observe``: the step sizes taken rise above the initial lr only if the loop observes."""
    lr = 1e-4
    args = ["run", "rlvr-arith", "step_size=kl_adaptive", f"step_size.lr={lr}",
            "step_size.kl_target=1000000.0", "step_size.factor=2", "step_size.lr_max=1",
            *TINY, "--steps", "2", "--json", "--device", "cpu"]
    assert cli.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method/step_size"] > lr
