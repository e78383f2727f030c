"""Imported first by the fork server of a worker group (service.workers.PRELOAD), for its one effect: the fork
server dies with the supervisor that started it, and the workers it forked die with it (service.parent_death).

Without it a SIGKILLed supervisor would leave them all running: each worker holds the write end of the fork
server's pipe from the supervisor (multiprocessing passes it to every child it forks), so the fork server never
sees that pipe close, and the workers wait for the fork server's death, which never comes.
"""

from __future__ import annotations

from service.parent_death import die_with_parent

die_with_parent()
