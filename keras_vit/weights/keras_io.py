"""Reads native Keras files as tensors keyed by keras_vit variable paths.

`.weights.h5` is read with h5py (no Keras object is built): each layer's group records its
name, and variables are stored by position, named here from the layer's role. `.keras` files
are loaded with `keras.saving.load_model(safe_mode=True)`, which also recovers the head count
and the GELU flavour from the saved config.
"""

import h5py
import keras
import numpy as np

from keras_vit.weights.lazy import LazyArray

NORM = ("gamma", "beta")
VARIABLE_NAMES = {
    "class_token": ("cls",),
    "posembed_input": ("pos_embedding",),
    "ln_1": NORM,
    "ln_2": NORM,
    "encoder_norm": NORM,
}


def _variable_names(layer):
    """The variable names of the layer named `layer`, in storage order (the hybrid stem's
    GroupNorms are `gn_root`, `gn1`..`gn3`, `gn_proj`)."""
    return NORM if layer.startswith("gn") else VARIABLE_NAMES.get(layer, ("kernel", "bias"))


def _h5_dataset(dataset, source):
    return LazyArray(dataset.shape, dataset.dtype, lambda: dataset[()], source)


def _walk(group, chain, out, path):
    variables = group.get("vars")
    if isinstance(variables, h5py.Group) and chain is not None:
        chain = chain + [variables.attrs.get("name", "?")]
        names = _variable_names(chain[-1])
        for j in range(len(variables)):
            name = names[j] if j < len(names) else f"variable_{j}"
            key = "/".join(chain + [name])
            out[key] = _h5_dataset(variables[str(j)], f"{key!r} in {path}")
    for name, child in group.items():
        if name != "vars" and isinstance(child, h5py.Group):
            _walk(child, [] if chain is None else chain, out, path)


def read_weights_h5(path):
    """Variable path -> LazyArray for a Keras `.weights.h5` file."""
    try:
        handle = h5py.File(path, "r")
    except OSError as error:
        raise ValueError(f"{path}: corrupt or truncated HDF5 file ({error}).") from None
    tensors = {}
    _walk(handle, None, tensors, path)
    if not tensors:
        raise ValueError(f"{path}: an HDF5 file without Keras weights.")
    return tensors


def read_keras(path, container):
    """`(tensors, meta)` of a `.weights.h5` (`container` "keras_h5") or `.keras` file."""
    if container == "keras_h5":
        return read_weights_h5(path), {}
    model = keras.saving.load_model(path, compile=False, safe_mode=True)
    try:
        encoder = model.get_layer("encoder")
    except ValueError:
        raise ValueError(f"{path}: a Keras model that is not a keras_vit Vision Transformer.") from None
    tensors = {
        v.path: LazyArray.wrap(np.asarray(keras.ops.convert_to_numpy(v)), f"{v.path!r} in {path}")
        for v in model.weights
    }
    meta = {
        "num_heads": encoder.num_heads,
        "approximate_gelu": encoder.approximate_gelu,
        "layer_norm_epsilon": encoder.layer_norm_epsilon,
    }
    return tensors, meta
