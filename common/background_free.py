"""Remove a file or an empty folder at once, its disk space freed on a worker thread.

On ext4, unlinking a file that holds data frees its blocks before the call returns (a
tenth of a millisecond a file): a probe rerun replacing seven files spends a millisecond
on it. Held open, the unlinked file is freed when its descriptor closes; the name is gone
at once (a reader of the folder never sees it), and the descriptor is closed on a worker
thread. A process that ends first leaves nothing behind: the system closes the
descriptor."""

from __future__ import annotations

import os
import queue
import threading

_IDLE_SECONDS = 0.2                 # the worker ends after this long without work
_pending: queue.Queue | None = None     # descriptors to close; None: no worker running
_lock = threading.Lock()


def remove_freeing_later(path: str | os.PathLike, folder: bool = False) -> None:
    """``path`` (a regular file, or an empty folder where ``folder``) unlinked now, its space
    freed later. Raises what ``os.unlink`` / ``os.rmdir`` raise."""
    remove = os.rmdir if folder else os.unlink
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | \
        (getattr(os, "O_DIRECTORY", 0) if folder else getattr(os, "O_NOFOLLOW", 0))
    if os.name != "posix":              # an open file cannot be removed there
        remove(path)
        return
    try:
        fd = os.open(path, flags)
    except OSError:                     # unreadable, a link, gone: removed the plain way
        remove(path)
        return
    try:
        remove(path)
    except BaseException:
        os.close(fd)
        raise
    _close_later(fd)


def _close_later(fd: int) -> None:
    """``fd`` closed by the worker, started where none runs: it ends once idle, so no
    thread outlives the work (nothing runs beside a fork long after a probe)."""
    global _pending
    with _lock:
        if _pending is None:
            _pending = queue.Queue()
            threading.Thread(target=_close_each, args=(_pending,), daemon=True,
                             name="qcdoctor-free").start()
        _pending.put(fd)


def _close_each(pending: queue.Queue) -> None:
    global _pending
    while True:
        try:
            fd = pending.get(timeout=_IDLE_SECONDS)
        except queue.Empty:
            with _lock:             # a descriptor put meanwhile is closed before the end
                if pending.empty():
                    _pending = None
                    return
            continue
        try:
            os.close(fd)
        except OSError:
            pass


def _forget_worker() -> None:
    """A forked child has no worker thread: it starts its own when it needs one."""
    global _pending, _lock
    _pending, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_worker)
