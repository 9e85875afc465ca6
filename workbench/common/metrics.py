"""The metric vocabulary: every name a testbed logs, with one meaning across testbeds.

A name means the same quantity wherever it is logged, so a report may put two testbeds' values
side by side. Each entry gives the definition, the unit, and, where one function computes it
for every loop, that function. Two families of names are open:

- ``method/<name>``: a method's own diagnostics (an entropy hook's ``metrics``, the step-size
  slot's ``method/step_size``); the method's docstring defines them;
- ``eval/pass@K``: the RLVR evaluation's pass@K for the task's ``eval_k``.

README's metrics table is ``markdown_table()`` (tests/test_metrics.py checks it), and a test
fails when a testbed logs a name that is not here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    definition: str
    unit: str
    computed_by: str = ""  # the one function that computes it, where the loops share one
    # the range every value lies in on every task (None: unbounded on that side); a task may
    # know a tighter one (``Task.metric_bounds``). The report's intervals stay inside it.
    lower: float | None = None
    upper: float | None = None


FRACTION = {"lower": 0.0, "upper": 1.0}
NONNEGATIVE = {"lower": 0.0}


_KL = "workbench.testbeds.shared.losses.approx_kl"
_CLIP = "workbench.testbeds.shared.losses.clip_fractions"
_LEN = "workbench.testbeds.rlvr.lengths.lengths_by_correctness"

VOCABULARY: dict[str, Metric] = {
    # -- what the run paid: the fair-comparison axes
    "cost/samples": Metric("training examples (or completions, or environment steps) consumed "
                           "so far", "samples", **NONNEGATIVE),
    "cost/grad_evals": Metric("per-example gradient evaluations so far", "evaluations",
                              **NONNEGATIVE),
    "cost/loss_evals": Metric("per-example loss evaluations so far (line searches, Polyak "
                              "steps)", "evaluations", **NONNEGATIVE),
    "cost/env_steps": Metric("environment steps so far, summed over the batched "
                             "environments", "steps", **NONNEGATIVE),
    "cost/updates": Metric("policy (or Q-network) updates so far", "updates",
                          **NONNEGATIVE),
    "cost/tokens": Metric("tokens processed by training so far (prompt and response)",
                          "tokens", **NONNEGATIVE),
    "cost/completions": Metric("completions kept for training this step", "completions",
                               **NONNEGATIVE),
    "cost/generated_tokens": Metric("response tokens generated this step", "tokens", **NONNEGATIVE),
    "time/wall_seconds": Metric("wall-clock seconds of the run so far, not counting set-up",
                                "s", **NONNEGATIVE),
    "time/env_steps_per_second": Metric("environment steps per second of the last update",
                                        "steps/s", **NONNEGATIVE),
    "time/rollout_seconds": Metric("seconds spent generating this step's completions", "s",
                                   **NONNEGATIVE),
    "time/rollout_tokens_per_second": Metric("generated tokens per second this step",
                                             "tokens/s", **NONNEGATIVE),
    "time/train_tokens_per_second": Metric("tokens per second through the training passes "
                                           "this step", "tokens/s", **NONNEGATIVE),
    # -- what the batch-size slot chose
    "batch/size": Metric("examples in the step's minibatch", "examples", **NONNEGATIVE),
    "batch/num_envs": Metric("environments in the update's rollout", "environments", **NONNEGATIVE),
    "batch/rollout_len": Metric("steps per environment in the update's rollout", "steps",
                                **NONNEGATIVE),
    "batch/minibatches": Metric("minibatches each epoch of the update's PPO pass cuts its "
                                "batch into", "minibatches", **NONNEGATIVE),
    "batch/sequence_length": Metric("the response cap of the step's rollouts (max_new_tokens, "
                                    "or a batch-size method's sequence_length)", "tokens",
                                    **NONNEGATIVE),
    "batch/prompts": Metric("prompts P in the step's batch", "prompts", **NONNEGATIVE),
    "batch/group_size": Metric("completions G per prompt in the step's batch (the mean over "
                               "prompts where group sizes differ)", "completions", **NONNEGATIVE),
    "batch/group_size_max": Metric("the largest prompt group in the step's batch",
                                   "completions", **NONNEGATIVE),
    "batch/noise_scale": Metric("the simple noise scale B = tr(Sigma) / |G|^2 (McCandlish et "
                                "al. 2018) of the noise_scale method", "examples"),
    "batch/grad_sq_est": Metric("noise_scale's bias-corrected estimate of |G|^2", "loss^2"),
    "batch/trace_cov_est": Metric("noise_scale's bias-corrected estimate of tr(Sigma)",
                                  "loss^2"),
    "batch/norm_test_stat": Metric("norm_test's statistic Var[g_i] / (b |g|^2) on the last "
                                   "tested batch of size b (Byrd et al. 2012)", "ratio",
                                   **NONNEGATIVE),
    # -- training quantities
    "train/loss": Metric("the objective f(x) on the full training set", "loss"),
    "train/batch_loss": Metric("the loss on the step's minibatch, before the step", "loss"),
    "train/grad_norm": Metric("L2 norm of the gradient of the loss the step used (before "
                              "clipping)", "norm", **NONNEGATIVE),
    "train/accuracy": Metric("fraction of the training examples (supervised) or of the "
                             "step's completions (RLVR) that are correct", "fraction", **FRACTION),
    "train/min_margin": Metric("smallest signed margin y <w, x> over the training set",
                               "margin"),
    "train/suboptimality": Metric("f(x) - f*, with f* exact or a bound", "loss"),
    "train/steps_to_target": Metric("first step at which the task's target metric reached "
                                    "its target value", "steps", **NONNEGATIVE),
    "train/fw_gap": Metric("Frank-Wolfe duality gap <grad f(x), x - s>, s the linear "
                           "minimisation oracle's vertex of the feasible set", "loss"),
    "train/infeasibility": Metric("how far x is outside the feasible set: |sum x - 1| or the "
                                  "largest negative entry (simplex), L1 excess (L1 ball)",
                                  "norm", **NONNEGATIVE),
    # -- linear-quadratic control (the lq testbed)
    "train/expected_cost": Metric("the policy's exact expected cost per step over the task's "
                                  "horizon, x'Qx + u'Ru averaged over the H steps (from the "
                                  "state's moments, not sampled)", "cost", **NONNEGATIVE),
    "train/relative_cost_gap": Metric("(J_H(policy) - J_H(K*)) / J_H(K*): the exact expected "
                                      "cost over the horizon relative to that of the "
                                      "Riccati-optimal stationary gain K* (DARE); may be "
                                      "slightly negative, a finite horizon's end effect",
                                      "fraction"),
    "train/stationary_cost_gap": Metric("(J(K) - J*) / J* of a linear policy u = Kx: its "
                                        "infinite-horizon average cost (Lyapunov) relative to "
                                        "the DARE's optimum; inf when A + BK is unstable",
                                        "fraction", **NONNEGATIVE),
    "val/loss": Metric("the loss on the held-out validation split", "loss"),
    "val/accuracy": Metric("fraction of the validation split classified correctly",
                           "fraction", **FRACTION),
    # -- reinforcement learning (control and RLVR)
    "train/return": Metric("mean undiscounted return of the episodes that ended in the "
                           "update's rollout", "return"),
    "train/success": Metric("fraction of the update's episodes that reached their goal "
                            "(agent tasks)", "fraction", **FRACTION),
    "train/path_ratio": Metric("mean of optimal length / episode length over the update's "
                               "successful episodes (1: every one took a shortest path)",
                               "ratio", **FRACTION),
    "train/malformed_fraction": Metric("fraction of the update's played turns whose action "
                                       "text named no action (a no-op; language-model agent "
                                       "tasks)", "fraction", **FRACTION),
    "eval/success_sampled": Metric("fraction of the held-out instances solved within max_steps "
                                   "by one episode of the policy sampled at its temperature "
                                   "(language-model agent tasks)", "fraction", **FRACTION),
    "eval/malformed_fraction": Metric("fraction of the held-out greedy episodes' turns whose "
                                      "action text named no action (language-model agent "
                                      "tasks)", "fraction", **FRACTION),
    "eval/success": Metric("fraction of the held-out instances the greedy policy solves "
                           "within max_steps (agent tasks)", "fraction", **FRACTION),
    "train/return_recent": Metric("mean return of the last 100 episodes", "return"),
    "train/td_loss": Metric("the Q-network's temporal-difference loss on the update's replay "
                            "batch: mean over its transitions of the squared (or Huber) error "
                            "between Q(s, a) and the target r + gamma (1 - terminated) "
                            "Q_target(s', a'), before the step", "loss", **NONNEGATIVE),
    "train/q_mean": Metric("mean of Q(s, a) over the update's replay batch, the online "
                           "network's value of the actions taken, before the step", "return"),
    "train/epsilon": Metric("probability that the epsilon-greedy behaviour policy acts at "
                            "random, at the update's last environment step", "fraction",
                            **FRACTION),
    "train/episode_length": Metric("mean length of the episodes that ended in the rollout",
                                   "steps", **NONNEGATIVE),
    "train/episodes": Metric("episodes that ended in the rollout", "episodes", **NONNEGATIVE),
    "train/rollout_entropy": Metric("mean policy entropy over the rollout's actions, as "
                                    "sampled", "nats"),
    "train/entropy": Metric("mean policy entropy per action (control) or per response token "
                            "(RLVR) on the update's batch", "nats"),
    "train/policy_loss": Metric("the policy-gradient term of the loss (PPO-clip surrogate or "
                                "REINFORCE), aggregated as the loop's loss_agg", "loss"),
    "train/value_loss": Metric("0.5 mean squared error of the value head against its "
                               "returns", "loss", **NONNEGATIVE),
    "train/entropy_loss": Metric("the entropy term the coefficient multiplies, aggregated as "
                                 "the policy loss", "nats"),
    "train/approx_kl": Metric("k3 estimate of KL(pi_old || pi): token mean of (r - 1) - log r, "
                              "log r clamped to +-20 (verl's clamp; verl's ppo_kl is k1)",
                              "nats", _KL, **NONNEGATIVE),
    "train/clip_frac_low": Metric("fraction of tokens where the lower PPO clip binds: "
                                  "r < 1 - clip_low and A < 0", "fraction", _CLIP, **FRACTION),
    "train/clip_frac_high": Metric("fraction of tokens where the upper PPO clip binds: "
                                   "r > 1 + clip_high and A > 0", "fraction", _CLIP, **FRACTION),
    "train/ess": Metric("normalised effective sample size (sum w)^2 / (N sum w^2) in (0, 1] of "
                        "the N sequence-level importance weights w_i = pi(y_i) / mu(y_i) of the "
                        "update's rollout (learner against the behaviour policy that sampled "
                        "it; control: one sequence per episode segment), 1 on-policy", "ratio",
                        "workbench.families.importance.normalised_ess", **FRACTION),
    "train/clip_frac": Metric("clip_frac_low + clip_frac_high (verl's pg_clipfrac)",
                              "fraction", _CLIP, **FRACTION),
    "train/dual_clip_frac": Metric("fraction of tokens where the dual clip binds (A < 0, "
                                   "-A r above -A c)", "fraction",
                                   "workbench.testbeds.shared.losses.ppo_clip_loss", **FRACTION),
    "train/ratio_mean": Metric("mean importance ratio pi / pi_old over the tokens", "ratio",
                               "workbench.testbeds.shared.losses.ppo_clip_loss", **NONNEGATIVE),
    "train/explained_variance": Metric("1 - Var[R - V] / Var[R] of the value head on the "
                                       "rollout", "fraction", upper=1.0),
    "train/kl_ref": Metric("KL(pi || pi_ref) to the starting checkpoint, estimator kl_kind, "
                           "aggregated as the policy loss", "nats",
                           "workbench.testbeds.shared.losses.kl_penalty"),
    "train/reward": Metric("mean reward of the step's completions", "reward"),
    "train/response_length": Metric("mean response length of the step's completions",
                                    "tokens", **NONNEGATIVE),
    "train/zero_variance_groups": Metric("fraction of prompt groups whose rewards are all "
                                         "equal", "fraction", **FRACTION),
    "train/rollout_draws": Metric("prompt draws the step needed (dynamic sampling refills)",
                                  "draws", **NONNEGATIVE),
    "train/truncated_fraction": Metric("fraction of completions cut at max_new_tokens",
                                       "fraction", **FRACTION),
    "train/rollout_kl": Metric("k3 estimate of KL(sampler || trainer) on the step's response "
                               "tokens: mean (w - 1) - log w, w = exp(log pi_old - log mu), mu "
                               "the rollout backend's own log-probability", "nats",
                               "workbench.testbeds.rlvr.mismatch.mismatch_metrics", **NONNEGATIVE),
    "train/rollout_is_mean": Metric("mean over the response tokens of the importance weight w "
                                    "of the trainer's policy against the sampler's", "ratio",
                                    "workbench.testbeds.rlvr.mismatch.mismatch_metrics",
                                    **NONNEGATIVE),
    "train/rollout_is_max": Metric("largest importance weight w over the response tokens",
                                   "ratio", "workbench.testbeds.rlvr.mismatch.mismatch_metrics",
                                   **NONNEGATIVE),
    "train/rollout_is_capped_frac": Metric("fraction of response tokens whose weight w exceeds "
                                           "the truncated-importance-sampling cap", "fraction",
                                           "workbench.testbeds.rlvr.mismatch.mismatch_metrics",
                                           **FRACTION),
    "train/precision_bits": Metric("bits of the floating-point format the policy's forward "
                                   "passes compute in, rollout and training alike: 32 (fp32) "
                                   "or 16 (bf16 autocast over fp32 master weights)", "bits",
                                   **NONNEGATIVE),
    "time/weight_sync_seconds": Metric("seconds to copy the policy's weights into the rollout "
                                       "engine after the step (0 where it samples from the "
                                       "training model itself)", "s", **NONNEGATIVE),
    "adv/mean": Metric("mean advantage over valid tokens (or actions)", "advantage"),
    "adv/std": Metric("standard deviation of the advantages over valid tokens", "advantage",
                      **NONNEGATIVE),
    "adv/abs_max": Metric("largest |advantage| over valid tokens", "advantage", **NONNEGATIVE),
    "adv/zero_fraction": Metric("fraction of valid tokens whose advantage is exactly 0",
                                "fraction", **FRACTION),
    "eval/accuracy": Metric("held-out greedy accuracy (pass@1 of the greedy completion)",
                            "fraction", **FRACTION),
    "eval/pass@1_sampled": Metric("held-out pass@1 of sampled completions (mean over the K "
                                  "samples)", "fraction", **FRACTION),
    "eval/response_length": Metric("mean length of the held-out greedy completions",
                                   "tokens", **NONNEGATIVE),
    # the length split by correctness (Dr. GRPO's length bias); absent when the subset is empty
    "train/response_length_correct": Metric(
        "mean token length of the completions whose answer was judged correct", "tokens", _LEN,
        **NONNEGATIVE),
    "train/response_length_incorrect": Metric(
        "mean token length of the completions whose answer was judged incorrect", "tokens",
        _LEN, **NONNEGATIVE),
    "eval/response_length_correct": Metric(
        "mean token length of the completions whose answer was judged correct", "tokens", _LEN,
        **NONNEGATIVE),
    "eval/response_length_incorrect": Metric(
        "mean token length of the completions whose answer was judged incorrect", "tokens",
        _LEN, **NONNEGATIVE),
    # -- the GPU (CUDA runs only; ``workbench.common.gpu``)
    "gpu/peak_memory_mib": Metric("peak GPU memory torch allocated in the run's process since "
                                  "the run started (torch.cuda.max_memory_allocated; on a seed "
                                  "axis, the seeds' shared computation)", "MiB",
                                  "workbench.common.gpu.GpuStats", **NONNEGATIVE),
    "gpu/utilization": Metric("percent of NVML's last sample period in which a kernel ran on "
                              "the run's GPU (any process's), read at most once a second; "
                              "omitted without NVML", "%", "workbench.common.gpu.GpuStats",
                              lower=0.0, upper=100.0),
    # -- what the method slots chose
    "method/step_size": Metric("the effective step size the step-size slot took (NaN where "
                               "a method has none)", "step size"),
    "method/entropy_coef": Metric("the entropy slot's coefficient c for the update",
                                  "coefficient"),
}

_OPEN = (re.compile(r"method/[A-Za-z0-9_]+"), re.compile(r"eval/pass@[1-9][0-9]*"))


def is_known(name: str) -> bool:
    """Whether `name` is in the vocabulary or in one of its open families."""
    return name in VOCABULARY or any(p.fullmatch(name) for p in _OPEN)


def unit(name: str) -> str:
    """The unit of a known metric ('' for an open family's name)."""
    return VOCABULARY[name].unit if name in VOCABULARY else ""


def bounds(name: str, task: tuple[float | None, float | None] | None = None
           ) -> tuple[float, float]:
    """The range (low, high) of ``name``'s values: the vocabulary's, narrowed by ``task``'s
    own (``Task.metric_bounds``) where given; -inf/inf where unbounded (``eval/pass@K``: a
    fraction; ``method/<name>``: unbounded)."""
    metric = VOCABULARY.get(name)
    if metric is None and _OPEN[1].fullmatch(name):
        metric = Metric("", "fraction", **FRACTION)
    low = metric.lower if metric is not None and metric.lower is not None else -math.inf
    high = metric.upper if metric is not None and metric.upper is not None else math.inf
    if task is not None:
        low = max(low, -math.inf if task[0] is None else task[0])
        high = min(high, math.inf if task[1] is None else task[1])
    return low, high


def markdown_table() -> str:
    """README's metrics table, one row per name."""
    rows = ["| metric | unit | definition |", "|---|---|---|"]
    for name, metric in VOCABULARY.items():
        where = f" (`{metric.computed_by}`)" if metric.computed_by else ""
        rows.append(f"| `{name}` | {metric.unit} | {metric.definition}{where} |")
    rows.append("| `method/<name>` | | a method's own diagnostic, defined in its docstring |")
    rows.append("| `eval/pass@K` | fraction | held-out pass@K over K sampled completions "
                "(`eval_k`) |")
    return "\n".join(rows)
