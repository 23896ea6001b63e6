"""One forward call's inputs: a tensor, a tuple/list of positional arguments or a dict of
keyword arguments, as ``compare_models`` takes them and as each sample of many is."""

from __future__ import annotations

import torch


def tensors_mapped(value, function):
    """``value`` with ``function`` applied to each tensor in it (in tuples, lists and
    dicts)."""
    if isinstance(value, torch.Tensor):
        return function(value)
    if isinstance(value, dict):
        return {k: tensors_mapped(v, function) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(tensors_mapped(v, function) for v in value)
    return value


def moved_to(value, device):
    return tensors_mapped(value, lambda tensor: tensor.to(device))


def copied(value):
    """``value`` with each tensor copied (a loader may reuse its batch buffers, a model may
    write into its inputs)."""
    return tensors_mapped(value, lambda tensor: tensor.detach().clone())


def call_args(inputs) -> tuple[tuple, dict]:
    if isinstance(inputs, dict):
        return (), inputs
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}


def called(model, inputs):
    """``model`` called on one call's inputs."""
    args, kwargs = call_args(inputs)
    return model(*args, **kwargs)
