"""A budget in samples or seconds alone is not also cut at the default 100 steps: a spec's
``budget: {samples: N}`` compares methods at matched samples whatever their batch (seen: a
sweep "at 200,000 environment steps" stopped its 4-environment PPO at 100 updates, 12,800)."""

from workbench.common.budget import MAX_STEPS, Budget


def test_steps_default_to_100_only_when_no_other_limit_is_given():
    assert Budget().steps == 100
    assert Budget.model_validate({}).steps == 100
    assert Budget.model_validate({"samples": 200_000}).steps == MAX_STEPS
    assert Budget.model_validate({"wall_seconds": 5}).steps == MAX_STEPS
    assert Budget.model_validate({"steps": 7, "samples": 9}).steps == 7


def test_a_samples_budget_alone_plans_its_steps_from_the_batch():
    budget = Budget.model_validate({"samples": 200_000})
    assert budget.planned_steps(128) == 1563
    assert budget.planned_steps(8192) == 25


def test_a_spec_with_a_samples_budget_alone_runs_past_100_steps(tmp_path):
    from workbench.spec import sweep as spec

    path = tmp_path / "s.yaml"
    path.write_text("name: s\ntask: {name: quadratic}\nmethods: {step_size: [constant]}\n"
                    "budget: {samples: 500}\n")
    assert spec.load(str(path)).spec.budget.steps == MAX_STEPS


def test_schedules_plan_over_the_steps_a_samples_budget_allows():
    """info['total_steps'] (a schedule's horizon) is the steps the budget allows at the task's
    batch, not MAX_STEPS nor the default 100."""
    import torch

    from workbench.testbeds.optimisation import logreg
    from workbench.testbeds.optimisation.loop import with_horizon

    params = logreg.LogRegParams(n_samples=100, batch_size=10)
    problem = logreg.build_problem(params, 0, torch.device("cpu"), MAX_STEPS)
    budget = Budget.model_validate({"samples": 555})
    assert with_horizon(problem, budget, params.batch_size).info["total_steps"] == 56
    full = with_horizon(problem, budget, None)  # a full batch: all 100 samples a step
    assert full.info["total_steps"] == 6
    assert with_horizon(problem, Budget(steps=30), 10).info["total_steps"] == 30
