"""GPU provenance tags and the ``gpu/*`` metrics (``workbench.common.gpu``): sensible values on the
CPU, the real ones on CUDA (``gpu``-marked)."""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest
import torch

from workbench.common import metrics
from workbench.common.gpu import GpuStats, gpu_tags
from workbench.engine.trial import with_gpu_metrics
from workbench.store import runs


def test_provenance_names_the_gpu_cuda_driver_and_the_rlvr_libraries():
    tags = runs.provenance()
    for key in ("gpu.name", "gpu.count", "cuda.version", "cuda.driver", "version.transformers",
                "version.vllm"):
        assert isinstance(tags[key], str) and tags[key], key
    assert tags["version.transformers"] == importlib.metadata.version("transformers")
    if importlib.util.find_spec("vllm") is None:
        assert tags["version.vllm"] == "not installed"
    assert tags["cuda.version"] == (torch.version.cuda or "none")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the values without a GPU")
def test_without_a_gpu_the_tags_say_none_and_no_metric_is_logged():
    tags = gpu_tags()
    assert tags["gpu.name"] == "none" and tags["gpu.count"] == "0"
    if importlib.util.find_spec("pynvml") is None:
        assert tags["cuda.driver"] == "none"
    stats = GpuStats("cpu")
    assert stats() == {}

    def log(step, m):
        return None

    assert with_gpu_metrics(log, torch.device("cpu")) is log  # nothing added, nothing wrapped


def test_the_gpu_metric_names_are_in_the_vocabulary():
    for name in ("gpu/peak_memory_mib", "gpu/utilization"):
        assert name in metrics.VOCABULARY
        assert metrics.VOCABULARY[name].computed_by == "workbench.common.gpu.GpuStats"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_tags_and_peak_memory():
    tags = gpu_tags()
    assert tags["gpu.name"] != "none" and int(tags["gpu.count"]) >= 1
    assert tags["cuda.version"] == torch.version.cuda and tags["cuda.driver"] != "none"
    device = torch.device("cuda")
    big = torch.empty(64 * 2**20, dtype=torch.uint8, device=device)  # 64 MiB
    stats = GpuStats(device)  # reset: the peak is what is allocated from now on
    more = torch.empty(32 * 2**20, dtype=torch.uint8, device=device)
    first = stats()
    assert set(first) <= set(metrics.VOCABULARY)
    assert first["gpu/peak_memory_mib"] >= 96
    if "gpu/utilization" in first:
        assert 0 <= first["gpu/utilization"] <= 100
    del big, more
    logged = []
    log = with_gpu_metrics(lambda step, m: logged.append(m), device, per_seed=True)
    log(0, [{"train/loss": 1.0}, None])
    assert logged[0][1] is None and logged[0][0]["train/loss"] == 1.0
    assert logged[0][0]["gpu/peak_memory_mib"] < first["gpu/peak_memory_mib"]  # reset per run
