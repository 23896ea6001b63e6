"""Inputs that are many samples: each one forward call's inputs.

``compare_models`` takes one call's inputs (a tensor, a tuple/list of positional
arguments, a dict of keyword arguments) or many: a ``torch.utils.data.DataLoader`` (each
batch one call) or ``Samples(iterable)`` (each item one call's inputs: a list of tensors,
a generator). A sample's index is its position in one pass, as the profiler's dataloader
index is: a loader that shuffles would name another batch on the next pass and is
refused. A pass can be repeated (to confirm a fix on every sample) where the samples are
a container or a loader; a generator gives one pass."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from qcdoctor.errors import QcdoctorError


class Samples:
    """Many forward calls' inputs: each item of ``iterable`` is one call's (a tensor, a
    tuple/list of positional arguments, or a dict of keyword arguments)."""

    def __init__(self, iterable: Iterable):
        if isinstance(iterable, (str, bytes)) or not hasattr(iterable, "__iter__"):
            raise QcdoctorError(f"Samples takes an iterable of samples, not a "
                                f"{type(iterable).__name__}", key="inputs",
                                fix="give a list of samples (each a tensor, a tuple of "
                                    "arguments or a dict), a generator, or a DataLoader")
        self.iterable = iterable

    def __iter__(self) -> Iterator:
        return iter(self.iterable)

    def __len__(self) -> int:
        return len(self.iterable)       # TypeError where the iterable has no length

    def __repr__(self) -> str:
        known = sample_count(self)
        return f"Samples({'?' if known is None else known} samples)"


def is_many(inputs) -> bool:
    """Whether ``inputs`` are many samples (a Samples or a DataLoader), not one call's."""
    if isinstance(inputs, Samples):
        return True
    try:
        from torch.utils.data import DataLoader
    except ImportError:                 # pragma: no cover - the probe needs torch anyway
        return False
    return isinstance(inputs, DataLoader)


def check_samples(inputs) -> None:
    """One clear error for a loader whose order changes between passes."""
    from torch.utils.data import DataLoader, RandomSampler
    if isinstance(inputs, DataLoader):
        sampler = inputs.batch_sampler.sampler if inputs.batch_sampler is not None and \
            hasattr(inputs.batch_sampler, "sampler") else inputs.sampler
        if isinstance(sampler, RandomSampler):
            raise QcdoctorError("the DataLoader shuffles: a bad case's index would name "
                                "another batch on the next pass", key="inputs",
                                fix="give the probe a loader with shuffle=False (the same "
                                    "dataset and batch size)")


def replayable(inputs) -> bool:
    """Whether a second pass gives the same samples again (a container, a loader), not
    a generator's one pass."""
    if not is_many(inputs):
        return True
    source = inputs.iterable if isinstance(inputs, Samples) else inputs
    try:
        return iter(source) is not source
    except TypeError:
        return False


def sample_count(inputs, max_samples: int | None = None) -> int | None:
    """How many samples a pass gives (at most ``max_samples``), where it is known before."""
    try:
        count = len(inputs)
    except TypeError:
        return max_samples
    return count if max_samples is None else min(count, max_samples)


def each_sample(inputs, max_samples: int | None = None) -> Iterator[tuple[int, object]]:
    """(index, one call's inputs) for the first ``max_samples`` samples (all: None)."""
    for index, sample in enumerate(inputs):
        if max_samples is not None and index >= max_samples:
            return
        yield index, sample


def checked_max_samples(value, key: str = "max_samples") -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise QcdoctorError(f"{key} is {value!r}", key=key,
                            fix="give a whole number of samples, 1 or more")
    return value


def checked_badcase(value, key: str = "badcase") -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise QcdoctorError(f"{key} is {value!r}", key=key,
                            fix="give a sample's index (0 is the first), as sample_errors.csv "
                                "and badcase.txt number them")
    return value
