"""Running a parent layer's own sub-layers without Keras' per-call bookkeeping."""


def run(layer, *args, **kwargs):
    """`layer.call(*args, **kwargs)` for a sub-layer that its parent built and calls from
    its own `call` with tensors already in their shared compute dtype and `training` given
    explicitly.

    The parent's `Layer.__call__` has already converted the inputs, resolved `training` and
    entered the autocast scope, so the sub-layer's own `__call__` would only repeat that
    work: ~170 times per ViT-B/16 forward pass in Python, and under `torch.compile`
    (`jit_compile=True` on PyTorch) each repetition is Keras code that dynamo cannot trace
    (signature binding in `CallSpec`) or recompiles per layer class (`_setattr_hook`).
    A quantised or rematerialised layer still goes through `__call__`, which dispatches
    those modes.
    """
    if getattr(layer, "quantization_mode", None) is not None or getattr(layer, "_remat_mode", None):
        return layer(*args, **kwargs)
    return layer.call(*args, **kwargs)
