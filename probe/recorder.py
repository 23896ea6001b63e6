"""Keys of one model's outputs, in execution order (a name and its call index),
and the fusion chains that tell which outputs compute the same thing."""

from __future__ import annotations

import torch

from qcdoctor.probe.calls import Call
from qcdoctor.probe.layers import FOLLOWERS, Layer
from qcdoctor.probe.stats import flatten_output

Key = tuple[str, int]          # (output name, how many times that name ran before)
Sig = tuple                    # (chain head key, fusion tokens BN aside)


class Recorder:
    """Keys and fusion chains of one model's outputs, in execution order; with
    ``calls``, each key's Call (what it reads, its quantizers: layer_calls.csv)."""

    def __init__(self, on_output, calls: dict | None = None):
        self.seen: dict[str, int] = {}
        self.chains: dict[Key, tuple[Key, tuple]] = {}
        self.on_output = on_output          # (key, layer, tensor, sig, producer key)
        self.held: list = []                # what on_output returned for the last report
        self.calls = calls                  # key -> Call, when recorded

    def report(self, layer: Layer, value, producer: Key | None, reads: tuple = ()) -> list[Key]:
        """The keys of ``value``'s tensors; ``reads``: the keys of the outputs it read."""
        if type(value) is torch.Tensor and not value.is_quantized and \
                value.is_floating_point() and value.layout is torch.strided and \
                not value.is_nested:
            # the common case, without a copy of it (sparse and nested tensors are
            # flattened below: made dense, or split into their components)
            name = layer.name
            seen = self.seen.get(name, 0)
            self.seen[name] = seen + 1
            key = (name, seen)
            if self.calls is not None:
                self.calls[key] = Call(name, layer.op_type, reads, layer.quantizer,
                                       layer.weight_quantizer)
            self.held = [self.on_output(key, layer, value, self._sig(key, layer, producer),
                                        producer)]
            return [key]
        outputs = flatten_output(value, layer.name)
        keys, self.held = [], []
        # (the eager tap reports with torch functions disabled: its own ops are no model's)
        for suffix, tensor in outputs:
            seen = self.seen.get(suffix, 0)
            self.seen[suffix] = seen + 1
            key = (suffix, seen)
            if self.calls is not None:
                self.calls[key] = Call(layer.name, layer.op_type, reads, layer.quantizer,
                                       layer.weight_quantizer)
            sig = self._sig(key, layer, producer) if len(outputs) == 1 else None
            self.held.append(self.on_output(key, layer, tensor, sig, producer))
            keys.append(key)
        return keys

    def _sig(self, key: Key, layer: Layer, producer: Key | None) -> Sig | None:
        tokens = layer.tokens
        if not tokens:
            return None
        before = self.chains.get(producer) if producer is not None else None
        if tokens[0] in FOLLOWERS and before is not None:
            chain = (before[0], before[1] + tokens)
        else:
            chain = (key, tokens)
        self.chains[key] = chain
        return chain[0], _without_bn(chain[1])


_NO_BN: dict[tuple, tuple] = {}     # fusion tokens -> the same without "Bn" (a few kinds)


def _without_bn(tokens: tuple) -> tuple:
    found = _NO_BN.get(tokens)
    if found is None:
        found = tuple(t for t in tokens if t != "Bn")
        if len(_NO_BN) < 4096:
            _NO_BN[tokens] = found
    return found
