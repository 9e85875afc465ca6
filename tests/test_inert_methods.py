"""A method whose effect is identically zero under the task's settings is refused at spec time
with the reason (``Method.inert``): KL-Cov's penalty |logp - logp_old| with one on-policy step
per batch."""

from __future__ import annotations

import pytest

from workbench.common.validation import SpecError
from workbench.spec import sweep as spec

SPEC = """name: inert-kl-cov
task:
  name: rlvr-arith
  params: {{kind: add, epochs: {epochs}, minibatches: {minibatches}}}
methods:
  entropy:
    - none
    - {{name: kl_cov, search_space: {{kl_cov_ratio: fixed}}}}
seeds: 1
trials: 1
budget: {{steps: 2}}
"""


@pytest.mark.parametrize(("epochs", "minibatches", "refused"),
                         [(1, 1, True), (2, 1, False), (1, 2, False)])
def test_kl_cov_with_one_on_policy_step_is_refused_with_the_reason(tmp_path, epochs,
                                                                   minibatches, refused):
    path = tmp_path / "sweep.yaml"
    path.write_text(SPEC.format(epochs=epochs, minibatches=minibatches))
    store = tmp_path / "store.db"
    if refused:
        with pytest.raises(SpecError) as err:
            spec.load(path, storage=f"sqlite:///{store}", device="cpu")
        said = str(err.value)
        assert "methods.entropy[1]" in said and "entropy/kl_cov" in said
        assert "changes nothing" in said and "epochs or minibatches above 1" in said
        assert len(said.splitlines()) == 1
    else:
        sweep = spec.load(path, storage=f"sqlite:///{store}", device="cpu")
        assert len(sweep.studies) == 2
    assert not store.exists()
