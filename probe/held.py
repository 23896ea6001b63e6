"""Model tensors kept for later reading: held by reference until measured
(copied first when the model is about to write them in place), and the
baseline's outputs stored in memory up to a budget, on disk beyond it."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import numpy as np
import torch

from qcdoctor.probe.recorder import Key


def ram_budget() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return min(int(line.split()[1]) * 1024 // 4, 2 << 30)
    except (OSError, ValueError, IndexError):
        pass
    return 512 << 20


class Held:
    """A model tensor kept by reference until it is measured (no copy of every output):
    copied first when the model is about to change it in place (Guard, the FX plan), or
    waited for while a worker reads it (``sync``: the worker's condition)."""

    __slots__ = ("tensor", "version", "state", "sync")
    PENDING, READING, FINISHED = 0, 1, 2

    def __init__(self, tensor: torch.Tensor, sync: threading.Condition | None = None):
        # inference tensors keep no version counter: held ones are protected by the graph
        self.tensor, self.state, self.sync = tensor, self.PENDING, sync
        self.version = None if tensor.is_inference() else tensor._version

    def secure(self) -> None:
        """Before an in-place op of the model on it: keep a copy (or let the reader
        finish)."""
        if self.sync is None:
            if self.state == self.PENDING:
                self.tensor, self.state, self.version = self.tensor.clone(), self.FINISHED, None
            return
        with self.sync:
            while self.state == self.READING:
                self.sync.wait()
            if self.state == self.PENDING:
                self.tensor, self.state, self.version = self.tensor.clone(), self.FINISHED, None

    def read(self) -> tuple[torch.Tensor, bool]:
        """(the tensor, whether it is as it was when held); the reader's turn."""
        with self.sync:
            if self.state == self.PENDING:
                self.state = self.READING
            return self.tensor, self.version is None or self.tensor._version == self.version

    def release(self, keep: bool = False) -> None:
        """The reader is done; ``keep``: the tensor stays held for a later reader."""
        with self.sync:
            if keep:
                if self.state == self.READING:
                    self.state = self.PENDING
            else:
                self.state, self.tensor = self.FINISHED, None
            self.sync.notify_all()


class Guard:
    """The held tensors, found by their own id and their base's (a view shares its
    base's storage); ``protect`` before every in-place op of the model."""

    def __init__(self, sync: threading.Condition | None = None):
        self._held: dict[int, list[Held]] = {}
        self._sync = sync

    def hold(self, tensor: torch.Tensor) -> Held:
        held = Held(tensor, self._sync)
        self._held.setdefault(id(tensor), []).append(held)
        base = tensor._base
        if base is not None:
            self._held.setdefault(id(base), []).append(held)
        return held

    def protect(self, values) -> None:
        if not self._held:
            return
        for value in values:
            if isinstance(value, torch.Tensor):
                for key in (id(value), id(value._base) if value._base is not None else None):
                    for held in self._held.pop(key, ()):
                        held.secure()
            elif isinstance(value, (list, tuple)):
                self.protect(value)

    def release(self, held: Held) -> None:
        """No longer held (an output dropped unused): the model's memory is its own again
        (reused while it runs, where a held tensor makes it allocate afresh)."""
        tensor = held.tensor
        if tensor is None:
            return
        for key in (id(tensor), id(tensor._base) if tensor._base is not None else None):
            holders = self._held.get(key)
            if holders is not None and held in holders:
                holders.remove(held)
                if not holders:
                    del self._held[key]

    def clear(self) -> None:
        self._held.clear()


class Store:
    """Baseline outputs: in memory up to a budget (by reference while the baseline runs,
    copied only before the model changes one in place), on disk beyond it."""

    def __init__(self, budget: int | None = None, guard: Guard | None = None):
        self._budget = ram_budget() if budget is None else budget
        self._used = 0
        self._guard = guard
        self._ram: dict[Key, Held | torch.Tensor] = {}
        self._files: dict[Key, tuple[Path, tuple]] = {}
        self._dir: tempfile.TemporaryDirectory | None = None
        self._recent: tuple[Key, torch.Tensor] | None = None

    def put(self, key: Key, tensor: torch.Tensor) -> Held | None:
        size = tensor.numel() * 4
        if self._used + size <= self._budget:
            self._used += size
            if self._guard is not None and tensor.is_cpu and tensor.dtype == torch.float32:
                held = self._ram[key] = self._guard.hold(tensor)
                return held
            self._ram[key] = tensor.detach().to("cpu", torch.float32, copy=True)
            return None
        copy = tensor.detach().to("cpu", torch.float32, copy=True,
                                  memory_format=torch.contiguous_format)
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="qcdoctor-probe-")
        path = Path(self._dir.name) / str(len(self._files))
        copy.numpy().tofile(path)
        self._files[key] = (path, tuple(copy.shape))
        return None

    def drop(self, key: Key) -> None:
        entry = self._ram.pop(key, None)
        tensor = _value(entry)
        if tensor is not None:
            self._used -= tensor.numel() * 4
        if isinstance(entry, Held) and self._guard is not None:
            self._guard.release(entry)
        spilled = self._files.pop(key, None)
        if spilled is not None:
            spilled[0].unlink(missing_ok=True)

    def peek(self, key: Key) -> torch.Tensor | None:
        if self._recent is not None and self._recent[0] == key:
            return self._recent[1]
        if key in self._ram:
            return _value(self._ram[key])
        if key in self._files:
            path, shape = self._files[key]
            return torch.from_numpy(np.fromfile(path, dtype=np.float32).reshape(shape))
        return None

    def take(self, key: Key) -> torch.Tensor | None:
        """The output, dropped from the store; the last one taken stays at hand (a
        follower of a fused intermediate compares with it again)."""
        if self._recent is not None and self._recent[0] == key:
            return self._recent[1]
        tensor = _value(self._ram.pop(key, None))
        if tensor is not None:
            self._used -= tensor.numel() * 4
        elif key in self._files:
            path, shape = self._files.pop(key)
            tensor = torch.from_numpy(np.fromfile(path, dtype=np.float32).reshape(shape))
            path.unlink(missing_ok=True)
        else:
            return None
        self._recent = (key, tensor)
        return tensor

    def kept(self, key: Key) -> torch.Tensor | None:
        """The copy kept in memory for ``key`` (None: held by reference, or on disk)."""
        entry = self._ram.get(key)
        return entry if isinstance(entry, torch.Tensor) else None

    def changed(self) -> list[Key]:
        """Outputs the model changed in place after they were held (not seen coming)."""
        return [key for key, held in self._ram.items()
                if isinstance(held, Held) and held.tensor is not None
                and held.version is not None and held.tensor._version != held.version]

    def close(self) -> None:
        self._ram.clear()
        self._recent = None
        if self._dir is not None:
            self._dir.cleanup()


def as_they_were(entries: dict) -> dict:
    """The baseline outputs as the baseline made them, once it has run: a held one is
    its copy where the model was about to write it; one changed unseen is left out."""
    values = {}
    for key, entry in entries.items():
        if isinstance(entry, Held):
            if entry.tensor is None or (entry.version is not None
                                        and entry.tensor._version != entry.version):
                continue
            values[key] = entry.tensor
        else:
            values[key] = entry
    return values


def _value(entry) -> torch.Tensor | None:
    return entry.tensor if isinstance(entry, Held) else entry
