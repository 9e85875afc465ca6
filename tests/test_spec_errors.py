"""Every kind of spec or argument error: exit code 2, a message naming the key, nothing written."""

import pytest
import torch

from tests.conftest import files_under, run_cli, tiny_spec
from workbench.cli import main as cli


def without(spec, *keys):
    for key in keys:
        spec.pop(key)
    return spec


CASES = {
    "unknown top-level key": (tiny_spec(trails=3), "trails", "allowed: artifact_root, budget"),
    "unknown nested key": (tiny_spec(pruner={"name": "median", "patience": 3}),
                           "pruner.patience", "allowed: name, p_threshold, reduction_factor"),
    "unknown task": (tiny_spec(task={"name": "mnist"}), "task.name",
                     "allowed: acrobot, cartpole, control"),
    "too few distinct problems": (
        tiny_spec(task={"name": "rlvr-arith", "params": {"digits_min": 1, "digits_max": 1}},
                  methods={"advantage": ["grpo"]}),
        "task.params", "distinct add problems"),
    "control param out of range": (
        tiny_spec(task={"name": "cartpole", "params": {"num_envs": 0}},
                  methods={"advantage": ["gae"]}),
        "task.params.num_envs", "greater than or equal to 1"),
    "unknown task param": (tiny_spec(task={"name": "logreg", "params": {"samples": 3}}),
                           "task.params.samples", "allowed: batch_size"),
    "unknown method": (tiny_spec(methods={"step_size": ["constant", "adamw"]}),
                       "methods.step_size[1]", "allowed for task logreg: adagrad_norm, adam,"),
    "unknown slot": (tiny_spec(methods={"step_size": ["constant"], "entropy": ["bonus"]}),
                     "methods.entropy", "allowed: step_size"),
    "missing slot": (tiny_spec(methods={}), "methods", "at least one slot"),
    "missing key": (without(tiny_spec(), "task"), "task", "required"),
    "wrong type": (tiny_spec(trials="ten"), "trials", "valid integer"),
    "wrong type nested": (tiny_spec(budget={"steps": [1]}), "budget.steps", "valid integer"),
    "out of range": (tiny_spec(budget={"steps": 0}), "budget.steps", "greater than or equal"),
    "task param out of range": (tiny_spec(task={"name": "logreg",
                                                "params": {"label_noise": 0.7}}),
                                "task.params.label_noise", "less than 0.5"),
    "bad choice": (tiny_spec(sampler="bayes"), "sampler.name", "allowed: tpe, random, grid"),
    "fixed value out of range": (
        tiny_spec(methods={"step_size": [{"name": "armijo", "fixed": {"beta": 2.0}}]}),
        "methods.step_size[0].fixed.beta", "outside"),
    "unknown hyperparameter": (
        tiny_spec(methods={"step_size": [{"name": "constant", "fixed": {"rate": 1}}]}),
        "methods.step_size[0].fixed.rate", "allowed: lr, momentum"),
    "bad search range": (
        tiny_spec(methods={"step_size": [{"name": "constant",
                                          "search_space": {"lr": {"low": 1, "high": 0.1}}}]}),
        "methods.step_size[0].search_space.lr", "must be below"),
    "requires not met": (
        tiny_spec(methods={"step_size": [{"name": "polyak", "fixed": {"f_star": "exact"}}]}),
        "methods.step_size[0]", "needs f_star, which task logreg does not provide"),
    "requires not met in search space": (
        tiny_spec(methods={"step_size": [{"name": "polyak", "search_space": {
            "f_star": {"choices": ["lower_bound", "exact"]}}}]}),
        "methods.step_size[0]", "needs f_star"),
    "unknown objective metric": (tiny_spec(objective={"metric": "eval/return"}),
                                 "objective.metric", "allowed: train/loss"),
    "objective a method in the sweep never logs": (
        tiny_spec(task={"name": "keydoor"}, methods={"advantage": ["grpo", "gae", "rloo"]},
                  objective={"metric": "train/value_loss"}),
        "objective.metric", "train/value_loss is never logged by the studies grpo, rloo: only "
        "an advantage method that reads values"),
    "objective the task's params never log": (
        tiny_spec(objective={"metric": "train/steps_to_target"}),
        "objective.metric", "never logged by the studies constant, polyak: it is logged only "
        "with a target (task.params.target_metric)"),
    "objective a pass@k the task's eval_k never logs": (
        tiny_spec(task={"name": "rlvr-arith", "params": {"eval_k": 4}},
                  methods={"advantage": ["grpo"]}, objective={"metric": "eval/pass@8"}),
        "objective.metric", "logged as eval/pass@4 (task.params.eval_k)"),
    "duplicate seeds": (tiny_spec(seeds=[1, 1]), "seeds", "distinct"),
    "varied unknown task param": (
        tiny_spec(task={"name": "logreg", "vary": {"batch_sise": [8, 64]}}),
        "task.vary.batch_sise", "did you mean 'batch_size'? allowed: batch_size, bias"),
    "varied value out of range": (
        tiny_spec(task={"name": "logreg", "vary": {"label_noise": [0.1, 0.7]}}),
        "task.vary.label_noise[1]", "less than 0.5"),
    "varied value listed twice": (
        tiny_spec(task={"name": "logreg", "vary": {"batch_size": [8, 8.0]}}),
        "task.vary.batch_size[1]", "listed twice (as batch_size[0]); allowed: distinct"),
    "varied empty list": (tiny_spec(task={"name": "logreg", "vary": {"batch_size": []}}),
                          "task.vary.batch_size", "empty list; allowed: a list of the values"),
    "varied and fixed": (
        tiny_spec(task={"name": "logreg", "params": {"dim": 5}, "vary": {"dim": [2, 3]}}),
        "task.vary.dim", "also in task.params; allowed: one value there, or a list"),
    "varied too many": (tiny_spec(task={"name": "logreg", "vary": {
        "dim": list(range(1, 21)), "n_samples": list(range(2, 22))}}),
        "task.vary", "400 combinations of values, each a study; allowed: at most 256"),
    "varied not a list": (tiny_spec(task={"name": "logreg", "vary": {"dim": 3}}),
                          "task.vary.dim", "valid list"),
    "bad storage": (tiny_spec(storage="mysql://db/x"), "storage", "allowed: sqlite:///"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_spec_error_exits_2_names_the_key_and_writes_nothing(case, write_spec, tmp_path,
                                                             monkeypatch, capsys):
    spec, path, fragment = CASES[case]
    spec_file = write_spec(spec)
    monkeypatch.chdir(tmp_path)
    before = files_under(tmp_path)
    assert cli.main(["sweep", str(spec_file), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"spec.yaml: {path}:" in err, err
    assert fragment in err, err
    assert "Traceback" not in err
    assert files_under(tmp_path) == before


def test_every_mistake_of_a_spec_is_reported_at_once_with_suggestions(write_spec, tmp_path,
                                                                       monkeypatch, capsys):
    """Five typos cost one run, not five: each problem on a line with its key path, the
    allowed values and, for a misspelt name, the closest one."""
    spec = tiny_spec(trails=3, pruner={"name": "medain"},
                     task={"name": "logreg", "params": {"n_sample": 64}},
                     methods={"step_size": ["constnt", {"name": "polyak", "fixed": {"gama": 1}},
                                            "armijo"]},
                     budget={"stpes": 20, "samples": 0})
    spec_file = write_spec(spec)
    monkeypatch.chdir(tmp_path)
    before = files_under(tmp_path)
    assert cli.main(["sweep", str(spec_file), "--quiet"]) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0].endswith("spec.yaml: 7 problems"), err
    expected = [
        "trails: unknown key; did you mean 'trials'? allowed: artifact_root, budget,",
        "pruner.name: 'medain': did you mean 'median'? allowed: median, hyperband,",
        "budget.stpes: unknown key; did you mean 'steps'? allowed: samples, steps,",
        "budget.samples: Input should be greater than or equal to 1",
        "task.params.n_sample: unknown key; did you mean 'n_samples'? allowed:",
        "methods.step_size[0]: unknown step_size method 'constnt'; did you mean 'constant'?",
        "methods.step_size[1].fixed.gama: step_size/polyak has no hyperparameter 'gama'; "
        "did you mean 'gamma0'? allowed:",
    ]
    for text in expected:
        assert sum(line.strip().startswith(text) for line in lines) == 1, (text, err)
    assert "Traceback" not in err and files_under(tmp_path) == before


@pytest.mark.parametrize("text, fragment", [
    ("task: [unclosed\n", "not valid YAML"),
    ("- a\n- b\n", "top level must be a mapping"),
    ("", "top level must be a mapping"),
])
def test_unreadable_yaml_exits_2(text, fragment, tmp_path, monkeypatch, capsys):
    (tmp_path / "spec.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["sweep", "spec.yaml"]) == 2
    assert fragment in capsys.readouterr().err
    assert files_under(tmp_path) == {tmp_path / "spec.yaml"}


@pytest.mark.parametrize("args, fragment", [
    (["sweep", "missing.yaml"], "missing.yaml: no such file"),
    (["sweep", "spec.yaml", "--workers", "0"], "allowed: 1 to"),
    (["sweep", "spec.yaml", "--workers", "100000"], "allowed: 1 to"),
    (["sweep", "spec.yaml", "--workers", "two"], "invalid int value"),
    (["sweep", "spec.yaml", "--storage", "sqlite:///:memory:"], "in-memory"),
    (["sweep", "spec.yaml", "--device", "tpu"], "unknown device 'tpu'"),
    (["frobnicate"], "invalid choice"),
    (["run", "mnist"], "unknown task 'mnist'"),
    (["run", "logreg"], "name a method: step_size=NAME"),
    (["run", "logreg", "step_size=adamw"], "allowed for task logreg: adagrad_norm, adam,"),
    # in the words the user typed, not the spec's key paths
    (["run", "logreg", "step_size=constant", "step_size.lr=-1"], "run: step_size.lr: "),
    (["run", "logreg", "step_size=constant", "n_sample=3"],
     "run: n_sample: unknown key; did you mean 'n_samples'?"),
    (["status", "spec.yaml", "--storage", "oracle://x"], "unsupported storage"),
])
def test_bad_arguments_exit_2_and_write_nothing(args, fragment, write_spec, tmp_path,
                                                monkeypatch, capsys):
    write_spec(tiny_spec())
    monkeypatch.chdir(tmp_path)
    before = files_under(tmp_path)
    with pytest.raises(SystemExit) if fragment in ("invalid int value", "invalid choice") \
            else _nothing():
        assert cli.main(args) == 2
    assert fragment in capsys.readouterr().err
    assert files_under(tmp_path) == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_exits_2(write_spec, tmp_path, monkeypatch, capsys):
    write_spec(tiny_spec())
    monkeypatch.chdir(tmp_path)
    assert cli.main(["sweep", "spec.yaml", "--device", "cuda"]) == 2
    assert "torch.cuda.is_available() is false" in capsys.readouterr().err
    assert files_under(tmp_path) == {tmp_path / "spec.yaml"}


def test_the_real_command_exits_2_without_a_traceback(write_spec, tmp_path):
    write_spec(tiny_spec(budget={"steps": -5}))
    before = files_under(tmp_path)
    result = run_cli("sweep", "spec.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert "spec.yaml: budget.steps:" in result.stderr
    assert "Traceback" not in result.stderr
    assert files_under(tmp_path) == before


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("word, meant", [("env_steps", "samples"), ("timesteps", "samples"),
                                         ("updates", "steps"), ("seconds", "wall_seconds")])
def test_a_budget_synonym_suggests_the_key_of_that_meaning(word, meant, write_spec, tmp_path,
                                                           monkeypatch, capsys):
    """``env_steps`` on cartpole is environment steps, i.e. ``samples``; ``steps`` (the
    look-alike) counts updates there, so suggesting it would change the budget's meaning."""
    spec_file = write_spec(tiny_spec(task={"name": "cartpole"}, methods={"advantage": ["gae"]},
                                     budget={word: 1000}))
    monkeypatch.chdir(tmp_path)
    before = files_under(tmp_path)
    assert cli.main(["sweep", str(spec_file), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"spec.yaml: budget.{word}: unknown key; did you mean {meant!r}?" in err, err
    assert files_under(tmp_path) == before
