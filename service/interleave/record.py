"""The record of a running comparison: one small file in the collection's index folder, read by every worker.

Why a file: a worker group (SSI_WORKERS > 1) shares nothing but its folders, and the comparison must survive a
worker's restart; like the served bundle's record (service.group_reload) it is written whole, then renamed.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from service.group_reload import write_whole
from ssi.interleaving import SequentialTest, TestMode

log = logging.getLogger(__name__)

RECORD = ".ssi-interleave.json"


@dataclass(frozen=True, slots=True)
class ComparisonSpec:
    """What `POST /admin/interleave` started: the candidate, against which served model, and the test's settings."""

    id: str
    bundle: str  # the candidate bundle's folder
    content_hash: str  # the candidate's
    served_hash: str  # the served model it is compared with (interleaving pauses while another one is served)
    share: float  # of first pages interleaved
    delta: float
    alpha: float
    beta: float
    budget: int  # interleaved impressions before an undecided comparison ends
    started: float  # time.time(): the comparison counts impressions from here
    mode: TestMode = "better"  # a record written before the guard existed ran the `better` test

    @property
    def test(self) -> SequentialTest:
        return SequentialTest(
            delta=self.delta, alpha=self.alpha, beta=self.beta, budget=self.budget, mode=self.mode
        )  # fmt: skip


def record_path(folder: Path) -> Path:
    return folder / RECORD


def read_record(folder: Path) -> ComparisonSpec | None:
    """The running comparison of the collection whose index folder is `folder`; None when none runs (or the file
    cannot be read, which is logged: a comparison is never half-read)."""
    try:
        return ComparisonSpec(**json.loads(record_path(folder).read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        log.warning("ignoring the comparison record in %s: %s", folder, exc)
        return None


def write_record(folder: Path, spec: ComparisonSpec) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_whole(record_path(folder), json.dumps(asdict(spec)))


def remove_record(folder: Path) -> None:
    record_path(folder).unlink(missing_ok=True)
