"""The one GPU device layer: what energy measurement (`zeus_run.energy`) and power-limit control
(`zeus_run.power`) need from the GPUs, and the one NVIDIA implementation of it (NVML).

* `Gpu` (`_base.py`): one GPU, the common interface both sides use (energy and
  power readings, limits, persistence mode, permission errors).
* `NvidiaGpu` / `NvidiaGpus` (`_nvidia.py`): that interface over NVML, and the NVML
  session that opens the GPUs. The only module that imports ``pynvml``.
* `GpuLibrary` (`_base.py`): the NVML calls `NvidiaGpu` makes; the one boundary
  where tests put their double (tests/fake_nvml.py, passed as ``nvml=``).

`zeus_run.power._zeusd.ZeusdGpu` is the other `Gpu`: NVML reads, writes through zeusd.
"""

from __future__ import annotations

from zeus_run.device._base import Gpu, GpuLibrary
from zeus_run.device._nvidia import NvidiaGpu, NvidiaGpus, device_text, import_nvml, open_library

__all__ = ["Gpu", "GpuLibrary", "NvidiaGpu", "NvidiaGpus", "device_text", "import_nvml", "open_library"]
