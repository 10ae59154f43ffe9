"""The one GPU device layer: what energy measurement (`zeus_run.energy`) and power-limit control
(`zeus_run.power`) need from the GPUs, and the one NVIDIA implementation of it (NVML).

* `GpuLibrary` (`_base.py`): the NVML calls both use, as a protocol. It is the boundary
  where tests put their double (tests/fake_nvml.py, passed as ``nvml=``).
* `_nvidia.py`: the only module that imports ``pynvml`` (nvidia-ml-py), and the
  device-level helpers both sides share (MIG mode, device text, permission errors).
"""

from __future__ import annotations

from zeus_run.device._base import GpuLibrary
from zeus_run.device._nvidia import device_text, import_nvml, is_mig_enabled, is_no_permission, open_library

__all__ = ["GpuLibrary", "device_text", "import_nvml", "is_mig_enabled", "is_no_permission", "open_library"]
