"""Signal a process only while it is still the one meant: the one pidfd-pinned signal."""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Callable
from signal import Signals


def signal_if(pid: int, sig: Signals, still_ours: Callable[[], bool]) -> bool:
    """Send ``sig`` to ``pid`` if ``still_ours()`` holds; return whether it was sent.

    A pidfd opened *before* the check pins the process, so a pid reused between the
    check and the signal cannot be hit.  Out of descriptors (EMFILE), the check and a
    plain ``kill`` are the best there is: a teardown must not stop for lack of an fd.
    """
    try:
        fd = os.pidfd_open(pid)
    except OSError as exc:
        if exc.errno != errno.EMFILE:
            return False  # gone already
        fd = -1
    try:
        if not still_ours():
            return False
        if fd >= 0:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
        return True
    except OSError:
        return False
    finally:
        if fd >= 0:
            os.close(fd)
