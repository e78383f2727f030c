"""A worker group's processes die with their supervisor (`ssi serve --workers N`: service.workers).

The supervisor holds the data folders' locks; a worker that outlived it would serve and write on with the folders
unlocked, beside the next server. Linux's PR_SET_PDEATHSIG has the kernel SIGKILL a process when its parent dies:
the fork server sets it (service.fork_server: its parent is the supervisor), and each worker sets it again (its
parent is the fork server), so the supervisor's death, SIGKILL included, takes the fork server and every worker.
"""

from __future__ import annotations

import os
import signal

from service.threads import libc

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(supervisor: int | None = None) -> None:
    """Be SIGKILLed when this process's parent dies; exit now if it already has (before the call took effect), or
    if the `supervisor` process, when given, has."""
    parent = os.getppid()
    lib = libc()
    try:
        if lib is not None:
            lib.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except AttributeError:  # not Linux: the supervisor's own stop still reaches the workers
        pass
    if os.getppid() != parent:
        os._exit(1)
    if supervisor is not None:
        try:
            os.kill(supervisor, 0)
        except ProcessLookupError:
            os._exit(1)
