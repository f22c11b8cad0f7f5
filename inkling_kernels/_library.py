"""The ``torch.ops.inkling`` namespace: how every op of the package is registered.

``torch.library.Library.define`` + ``impl`` + ``register_fake`` (the pattern of vLLM's
``direct_register_custom_op``): the op's Python implementation is called straight from the
dispatcher, without the argument re-parsing and schema inference layer of
``torch.library.custom_op``, which costs more host time per call (docs/results.md, host time per call: ~60 us
against ~90 us through ``custom_op`` on the H200 host). Registering an op adds a name to the
dispatcher; it patches nothing.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

import torch
from torch.library import Library

from ._validate import meta_allowed

NAMESPACE = "inkling"
LIB = Library(NAMESPACE, "FRAGMENT")


def register_op(name: str, schema: str, impl: Callable, fake: Callable, *, keys=("CUDA", "CPU")):
    """Define ``torch.ops.inkling.<name>`` with ``schema`` (e.g. ``"(Tensor x) -> Tensor"``),
    implemented by ``impl`` on each dispatch key in ``keys`` and by ``fake`` on fake/meta
    tensors (the argument checks, then shapes, for torch.compile). A call whose first tensor is
    on ``meta`` (shape inference) has its checks accept ``meta`` tensors; a call on CPU or CUDA
    tensors with a side tensor on ``meta`` is refused by them. Returns the op's default overload."""

    @functools.wraps(fake)
    def checked_fake(*args, **kwargs):
        on_meta = isinstance(args[0], torch.Tensor) and args[0].device.type == "meta"
        with meta_allowed() if on_meta else contextlib.nullcontext():
            return fake(*args, **kwargs)

    LIB.define(name + schema)
    for key in keys:
        LIB.impl(name, impl, key)
    torch.library.register_fake(f"{NAMESPACE}::{name}", checked_fake, lib=LIB)
    return getattr(torch.ops.inkling, name).default
