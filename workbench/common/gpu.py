"""What the GPU of this process is and what a run used of it: provenance tags and metrics.

- ``gpu_tags()``: ``gpu.name`` and ``gpu.count`` (NVML, else torch where CUDA is already
  initialised; ``none`` on a machine without one), ``cuda.version`` (the CUDA torch was built
  with; ``none`` for a CPU build), ``cuda.driver`` (the NVIDIA driver's version).
- ``GpuStats(device)``: reset at a run's start, then ``GpuStats()`` gives the metrics
  ``gpu/peak_memory_mib`` (``torch.cuda.max_memory_allocated`` since the reset) and
  ``gpu/utilization`` (NVML's percent of the last sample period in which a kernel ran, read
  at most once a second, omitted where NVML is absent); nothing when the device is not CUDA.

NVML (the ``pynvml`` module of ``nvidia-ml-py``) is read without creating a CUDA context, so
asking for the tags costs no GPU memory in a process that never computes on the GPU.
"""

from __future__ import annotations

import os
import time

import torch


def _nvml():
    """The initialised ``pynvml`` module, or None (not installed, no driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # ImportError, NVMLError (no driver, no device): no NVML here
        return None


def _nvml_handle(nvml, index: int = 0):
    """The NVML handle of this process's ``index``-th visible GPU (CUDA_VISIBLE_DEVICES
    maps it to NVML's numbering), or None."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
               if v.strip()]
    try:
        if not visible:
            return nvml.nvmlDeviceGetHandleByIndex(index)
        chosen = visible[index]
        if chosen.isdigit():
            return nvml.nvmlDeviceGetHandleByIndex(int(chosen))
        return nvml.nvmlDeviceGetHandleByUUID(chosen)
    except Exception:
        return None


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_tags() -> dict[str, str]:
    """Provenance tags: ``gpu.name``, ``gpu.count``, ``cuda.version``, ``cuda.driver``."""
    tags = {"gpu.name": "none", "gpu.count": "0", "cuda.version": torch.version.cuda or "none",
            "cuda.driver": "none"}
    nvml = _nvml()
    if nvml is not None:
        try:
            tags["cuda.driver"] = _text(nvml.nvmlSystemGetDriverVersion())
            handle = _nvml_handle(nvml)
            if handle is not None:
                tags["gpu.name"] = _text(nvml.nvmlDeviceGetName(handle))
        except Exception:
            pass
    if torch.version.cuda and torch.cuda.is_available():
        tags["gpu.count"] = str(torch.cuda.device_count())
        if tags["gpu.name"] == "none":  # no NVML: torch names it (creating its context)
            tags["gpu.name"] = torch.cuda.get_device_name(0)
        if tags["cuda.driver"] == "none":
            tags["cuda.driver"] = "unknown"
    return tags


class GpuStats:
    """The ``gpu/*`` metrics of one run on ``device``; the peak is reset on construction."""

    UTILIZATION_EVERY = 1.0  # seconds between NVML reads

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.on_cuda = self.device.type == "cuda"
        self._handle = None
        self._last_read = -float("inf")
        if self.on_cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
            nvml = _nvml()
            if nvml is not None:
                self._nvml = nvml
                self._handle = _nvml_handle(nvml, self.device.index or 0)

    def __call__(self) -> dict[str, float]:
        if not self.on_cuda:
            return {}
        metrics = {"gpu/peak_memory_mib": torch.cuda.max_memory_allocated(self.device) / 2**20}
        now = time.monotonic()
        if self._handle is not None and now - self._last_read >= self.UTILIZATION_EVERY:
            self._last_read = now
            try:
                rates = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
                metrics["gpu/utilization"] = float(rates.gpu)
            except Exception:
                self._handle = None  # NVML cannot read it here: omit it from now on
        return metrics
