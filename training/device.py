"""Where a gradient-trained model takes its steps: `--device auto|cpu|cuda[:N]`.

`auto` takes the GPU when PyTorch sees one, else the CPU. On the CPU the trainer runs as it always has
(host sampling, numpy loss bookkeeping); on a GPU the whole step runs there (training.device_step).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def check_device(spec: str) -> str:
    """The settings' validator: the spelling only (whether the GPU is there is asked when training starts)."""
    if not DEVICE_PATTERN.match(spec):
        raise ValueError(f"--device takes auto, cpu, cuda or cuda:N, got {spec!r}")
    return spec


def resolve_device(spec: str) -> torch.device:
    """The torch device for `spec`; a clear error when a GPU is asked for and there is none.

    PyTorch is imported here, not above: the settings (training.settings) validate `--device` where PyTorch
    may be absent (`ssi.train`'s options are checked before the train extra is asked for)."""
    import torch

    check_device(spec)
    if spec == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(f"--device {spec}: PyTorch sees no GPU here (torch {torch.__version__}); use --device cpu")
    device = torch.device(spec)
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"--device {spec}: this machine has {torch.cuda.device_count()} GPU(s), numbered from 0")
    return device
