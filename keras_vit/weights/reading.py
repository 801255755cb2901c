"""Reads any supported checkpoint, a file, a folder or a named checkpoint, as a canonical
`Checkpoint`: the container is opened (`containers`), its format detected (`formats`), its
variants cleaned up, its metadata read and its keys mapped through the format's table.
Nothing here imports Keras."""

import os

from keras_vit.variants import list_models
from keras_vit.weights import containers, formats, registry
from keras_vit.weights.canonical import FC_NORM, Checkpoint, Metadata, check_heads, check_metadata, known_num_heads

CHECKPOINT_SUFFIXES = (".npz", ".safetensors", ".pth", ".pt", ".bin", ".h5", ".keras", ".json")


def _width(fmt, tensors, path):
    """The model width, from the final LayerNorm (under the format's own name), on the tokens
    or, timm's `fc_norm`, on the pooled features."""
    keys = [fmt.table.key_of(k) for k in ("Transformer/encoder_norm/scale", FC_NORM[0])]
    key = next((k for k in keys if k in tensors), None)
    if key is None:
        raise ValueError(f"{path}: checkpoint has no final LayerNorm ({keys[0]!r}).")
    return tensors[key].shape[-1]


def read_checkpoint(path, num_heads=None):
    """Opens any supported checkpoint at `path` as a canonical `Checkpoint`.

    `num_heads` is used only for files that do not record it (timm files, `.weights.h5`,
    transformers weights without `config.json`); by default the head count of the named
    models of that width (`known_num_heads`); a width no named model has is refused.
    """
    return read_raw(containers.open_checkpoint(path), num_heads)


def read_raw(raw, num_heads=None):
    """`read_checkpoint` of an opened `containers.RawCheckpoint` (e.g. the backbone's part of a
    dense model's checkpoint)."""
    fmt = formats.detect(raw)
    if fmt is None:
        sample = ", ".join(repr(k) for k in sorted(raw.tensors)[:5])
        raise ValueError(
            f"{raw.path}: unrecognised checkpoint layout (keys like {sample}); expected one of the "
            f"formats {', '.join(f.name for f in formats.FORMATS)}."
        )
    tensors = fmt.prepare(raw) if fmt.prepare else dict(raw.tensors)
    meta = fmt.metadata(raw, tensors) if fmt.metadata else Metadata()
    check_metadata(meta, raw.path)
    width = _width(fmt, tensors, raw.path)
    heads = meta.num_heads or num_heads or known_num_heads(width)
    if heads is None:
        raise ValueError(
            f"{raw.path}: the file does not record its attention head count and no named model is {width} wide; "
            "pass num_heads= (keras-vit convert: --num-heads)."
        )
    check_heads(heads, width, raw.path)
    tensors = fmt.to_canonical(tensors, heads, what=f"checkpoint {raw.path}")
    options = dict(meta.options)
    declared = options.pop("depth", None)  # the blocks are counted from the tensors; a record must agree
    ckpt = Checkpoint(raw.path, fmt.name, tensors, heads, meta.grid, {"interpolation": fmt.interpolation, **options})
    if declared is not None and declared != ckpt.depth:
        raise ValueError(
            f"{raw.path}: its configuration declares {declared} blocks but its tensors hold {ckpt.depth}; "
            "expected a configuration that matches its weights."
        )
    ckpt.check()
    return ckpt


def resolve(source, config=None, force_download=False):
    """`(path, entry)`: the local path of `source`, an existing file or folder (entry None), or
    a named checkpoint's `registry.WeightsEntry` for the `ViTConfig` `config`'s variant and its
    file (downloaded into the cache if needed; again with `force_download`)."""
    if isinstance(source, os.PathLike) or (isinstance(source, str) and os.path.lexists(source)):
        if not os.path.lexists(source):  # a broken link or a loop is there: the reader names what it is
            raise FileNotFoundError(f"No checkpoint file or folder at {os.fspath(source)}.")
        return os.fspath(source), None
    if not isinstance(source, str):
        raise ValueError(
            f"weights={source!r}: expected None, a checkpoint name, a path, or PretrainedWeights."
        )
    if not registry.is_named(source) or source.endswith(CHECKPOINT_SUFFIXES):
        raise FileNotFoundError(f"No checkpoint file or folder at {source}.")
    from keras_vit.weights.download import fetch

    variant = registry.variant_of(config) if config is not None else None
    if config is not None and variant is None:
        raise ValueError(
            f"Unknown weights {source!r} for this architecture: not an existing file or folder, and "
            f"named checkpoints exist only for the named models ({', '.join(list_models())})."
        )
    entry = registry.find(source, variant)
    return fetch(entry, force=force_download), entry


def weights_checkpoint(source, config=None, num_heads=None, force_download=False):
    """Reads `source` (name or path) as a canonical `Checkpoint`. The head count, which timm
    and `.weights.h5` files do not record, comes from `config` (a `ViTConfig`) or
    `num_heads`, else, for a named checkpoint, from its model (`entry.variant`); named
    checkpoints are looked up for `config`'s variant, and carry their entry's preprocessing (and
    its `quick_gelu`, where the file does not record it); `force_download` fetches a named
    checkpoint's file again."""
    if isinstance(source, Checkpoint):
        return source
    heads = config.num_heads if config else num_heads
    path, entry = resolve(source, config, force_download)
    if heads is None and entry is not None:
        heads = registry.architecture(entry.variant).get("num_heads")
    ckpt = read_checkpoint(path, num_heads=heads)
    if entry is None:
        return ckpt
    quick_gelu = entry.quick_gelu if ckpt.quick_gelu is None else ckpt.quick_gelu
    return ckpt.with_options(preprocessing=entry.preprocessing, quick_gelu=quick_gelu)
