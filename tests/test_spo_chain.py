"""SPO-chain against numbers from the reference's own code, and its value request."""

import math

import pytest
import torch

from methods.advantage.spo_chain import SPOChain
from workbench.families import check

# Each case: the sampling probabilities of an episode's steps, its score, the cut-point
# interval, V(s_0) .. V(s_L) (a value per state), and the advantages AIFrameResearch/SPO's
# math_episode_generator_with_mc_advantages.py gives: its cut-point selection
# (_create_value_estimation_requests: probability < 0.9, shifted by one, every interval-th) and
# its _compute_token_advantages, run (in a scratch directory, not in this repo) on these
# probabilities with each cut point's value taken from the list, one token per step.
CASES = {
    "the first step cuts (the start's value is the base)": (
        [0.5, 0.95, 0.3, 0.99, 0.2, 0.6, 0.97], 1.0, 1,
        [0.4, 0.5, 0.45, 0.7, 0.65, 0.8, 0.9, 1.0],
        [0.05, 0.0, 0.2, 0.0, 0.15, 0.2, 0.0]),
    "every second cut point, first position 0": (
        [0.95, 0.5, 0.3, 0.99, 0.2, 0.6, 0.97], 0.0, 2,
        [0.4, 0.5, 0.45, 0.7, 0.65, 0.8, 0.9, 1.0],
        [0.0, 0.15, 0.15, 0.0, -0.65, -0.65, 0.0]),
    "no cut point": ([0.95, 0.99, 0.97], 1.0, 1, [0.3, 0.6, 0.9, 1.0], [0.0, 0.0, 0.0]),
    "every step cuts": ([0.1, 0.2, 0.3, 0.4], 0.0, 1, [0.5, 0.25, 0.5, 0.75, 0.0],
                        [-0.25, 0.25, 0.25, -0.75]),
}


def batch(cases):
    """The cases as one right-padded (B, T) batch (score as the last step's reward)."""
    width = max(len(c[0]) for c in cases)
    rows = len(cases)
    rewards = torch.zeros(rows, width, dtype=torch.float64)
    mask = torch.zeros(rows, width)
    log_probs = torch.full((rows, width), math.log(0.5), dtype=torch.float64)  # padding
    values = torch.full((rows, width + 1), 123.0, dtype=torch.float64)
    for row, (probs, score, _, state_values, _) in enumerate(cases):
        n = len(probs)
        rewards[row, n - 1] = score
        mask[row, :n] = 1
        log_probs[row, :n] = torch.log(torch.tensor(probs, dtype=torch.float64))
        values[row, :n + 1] = torch.tensor(state_values, dtype=torch.float64)
    return rewards, mask, log_probs, values


@pytest.mark.parametrize("case", CASES)
def test_matches_the_reference_code(case):
    probs, score, interval, state_values, expected = CASES[case]
    rewards, mask, log_probs, values = batch([CASES[case]])
    method = SPOChain(interval=interval)
    advantages, returns = method.compute(rewards=rewards, mask=mask, old_log_probs=log_probs,
                                         mc_values=values)
    assert advantages[0].tolist() == pytest.approx(expected, abs=1e-12)
    assert torch.equal(advantages, returns)


def test_a_batch_of_rows_is_each_row_alone_and_padding_is_zero():
    cases = list(CASES.values())
    rewards, mask, log_probs, values = batch(cases)
    advantages, _ = SPOChain(interval=1).compute(rewards=rewards, mask=mask,
                                                 old_log_probs=log_probs, mc_values=values)
    for row, case in enumerate(cases):
        if case[2] == 1:
            n = len(case[0])
            assert advantages[row, :n].tolist() == pytest.approx(case[4], abs=1e-12)
            assert not advantages[row, n:].any()


def test_value_request_names_exactly_the_cut_points_states():
    probs, _, interval, state_values, _ = CASES["every second cut point, first position 0"]
    rewards, mask, log_probs, values = batch([CASES["every second cut point, first position 0"]])
    request = SPOChain(interval=2, continuations=3).value_request(mask=mask,
                                                                  old_log_probs=log_probs)
    assert request.continuations == 3
    # low-probability steps 1, 2, 4, 5 -> cut points 0, 1, 3, 4 -> every second: 0 and 3,
    # whose values are those of the states s_1 and s_4
    assert request.points[0].nonzero().flatten().tolist() == [1, 4]


def test_without_the_probability_mask_confident_steps_share_their_segment():
    rewards, mask, log_probs, values = batch([CASES["every second cut point, first position 0"]])
    advantages, _ = SPOChain(interval=2, probability_mask=False).compute(
        rewards=rewards, mask=mask, old_log_probs=log_probs, mc_values=values)
    assert advantages[0].tolist() == pytest.approx([0.0, 0.15, 0.15, 0.15, -0.65, -0.65, -0.65])


def test_passes_the_advantage_contract():
    assert check(SPOChain) == []


def test_a_method_reading_values_it_did_not_request_fails_the_contract():
    class Leaky(SPOChain):
        name = "leaky_spo_chain"

        def compute(self, *, rewards, mask, old_log_probs, mc_values, **_):
            advantages, _ = super().compute(rewards=rewards, mask=mask,
                                            old_log_probs=old_log_probs, mc_values=mc_values)
            advantages = advantages + mc_values[:, 3:4] * (mask != 0)  # never requested there
            return advantages, advantages.clone()

    assert any("reads mc_values at states its value_request() did not name" in p
               for p in check(Leaky))
