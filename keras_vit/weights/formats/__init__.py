"""The checkpoint formats keras_vit reads and writes, one module each, registered in `FORMATS`.

To add a checkpoint family, write one module here defining `FORMAT = Format(...)` (see
`formats.base`) and add it to `FORMATS`: detection, `convert`'s output choice,
`export(format=)` and `keras-vit convert --format` follow from the list. Nothing here
imports Keras.
"""

import os

from keras_vit.weights.formats import (
    dinov3, eomt, eva, hf_aimv2, hf_clip, hf_families, keras, kerashub, kerashub_families, open_clip, open_clip_timm,
    original, pe, rope_vit, timm)

FORMATS = [
    original.FORMAT,
    dinov3.FORMAT,
    rope_vit.FORMAT,
    eva.FORMAT,
    pe.FORMAT,
    open_clip.FORMAT,
    open_clip_timm.FORMAT,
    timm.FORMAT,
    hf_aimv2.FORMAT,
    eomt.FORMAT,
    hf_families.DEIT,
    hf_families.DINOV3,
    hf_families.DINOV2,
    hf_clip.CLIP,
    hf_families.SIGLIP2,
    hf_families.SIGLIP,
    hf_clip.HF,
    keras.FORMAT,
    kerashub.FORMAT,
    *kerashub_families.FORMATS,
]


def detect(raw):
    """The first format of `FORMATS` that recognises the `RawCheckpoint` `raw`, or None."""
    return next((f for f in FORMATS if f.detect(raw)), None)


def export_names():
    """The names `export(format=)` and `convert --format` accept, e.g. "npz", "timm"."""
    return tuple(f.option for f in FORMATS if f.write is not None)


def by_option(option):
    """The writable format called `option` (its `export_name` or `name`)."""
    for f in FORMATS:
        if f.write is not None and option in (f.option, f.name):
            return f
    raise ValueError(f"Unknown format {option!r}; expected one of {export_names()}.")


def for_output(path):
    """The format that writes `path`, chosen from its name: a format's suffix, else (an
    existing folder or a name without suffix) the folder format."""
    path = os.fspath(path)
    writable = [f for f in FORMATS if f.write is not None]
    chosen = next((f for f in writable if f.suffixes and path.endswith(f.suffixes)), None)
    if chosen is None and (os.path.isdir(path) or not os.path.splitext(path)[1]):
        chosen = next((f for f in writable if f.folder), None)
    if chosen is None:
        raise ValueError(
            f"Cannot tell the output format from {path!r}; pass format= one of {export_names()} ({output_rules()})."
        )
    return chosen


def output_rules():
    """How an output name picks its format, e.g. ".npz -> npz, a folder -> hf"."""
    writable = [f for f in FORMATS if f.write is not None]
    return ", ".join(
        f"{' / '.join(f.suffixes)} -> {f.option}" if f.suffixes else f"a folder -> {f.option}"
        for f in writable
        if f.suffixes or f is next(w for w in writable if w.folder)
    )
