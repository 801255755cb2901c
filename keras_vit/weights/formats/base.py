"""`Format`: everything keras_vit knows about one checkpoint family's key layout, in one object.

A format module (`formats/timm.py`, ...) defines one `FORMAT = Format(...)`, and
`formats/__init__.py` lists it in `FORMATS`; detection, `convert`'s output choice,
`export(format=)` and the command line's choices all come from that list.

The callables:

- `detect(raw) -> bool`: whether a `containers.RawCheckpoint` (its `container`, its keys,
  its `meta`) is in this format. Formats are tried in the order of `FORMATS`.
- `prepare(raw) -> dict`: key -> LazyArray in the names of `table`'s `theirs` side: the
  clean-up of the variants found in the wild (prefixes, old spellings, a missing class-token
  row). None: `raw.tensors` as they are.
- `metadata(raw, tensors) -> Metadata`: what the checkpoint records besides its tensors
  (GELU flavour, heads, grid, LayerNorm epsilon); `tensors` are `prepare`'s. None: nothing.
- `write(path, checkpoint)`: writes a canonical `Checkpoint` at `path` (a file, or a folder
  when `folder`), atomically; `path` is free (the caller checked). None: read-only format.

A format validates nothing itself: every declared shape is bounded where its container
declares it (`LazyArray`, `keras_vit.utils.limits`), its metadata checked by `check_metadata`, and
its canonical tensors' dtypes and shapes against the architecture by `Checkpoint.check`, all
in `reading.read_checkpoint`, before the builder or a writer gets them.
"""

import dataclasses
from typing import Callable, Optional

from keras_vit.config.interpolation import DEFAULT
from keras_vit.weights import stems
from keras_vit.weights.table import Table

# The builder options of issue 31 a checkpoint holds in its keys (`Checkpoint.architecture`).
BLOCK_OPTIONS = ("qk_norm", "norm", "qkv_bias", "proj_bias", "mlp_bias")
# AIMv2's options a checkpoint holds in its keys and metadata: the writers but keras's refuse them.
AIMV2_OPTIONS = ("patch_norm", "sincos_form", "map_head")
# CLIP's options a checkpoint holds in its keys: the formats that do not record them refuse them.
CLIP_OPTIONS = ("pre_norm", "patch_bias", "projection_dim")
# EVA-CLIP's options a checkpoint holds in its keys: the attention's inner norm, the projection's bias.
EVA_CLIP_OPTIONS = ("attention_norm", "projection_bias")
# Perception Encoder's, recorded by its reader's metadata: the rotary index offset, the MAP head's heads.
PE_OPTIONS = ("rope_offset", "map_heads")
# A zero-shot head's unit-length features (`ImageTextModel.classifier`): keras_vit's own files alone record them.
HEAD_OPTIONS = ("unit_features",)


@dataclasses.dataclass(frozen=True)
class Format:
    """`name`: `Checkpoint.format` ("original", "timm", "hf", "keras", ...). `table`: its key
    table (the rows of registered stems for `name` are added to it). `suffixes`: output names
    that choose it in `convert` (e.g. `(".safetensors",)`); `folder`: `write` makes a folder
    (an output without suffix, or an existing folder, chooses it). `export_name`: its name in
    `export(format=)` / `convert --format` (default `name`). `canonical_keys`: its keys are the
    canonical ones, so the keys of registered stems pass through as they are.
    `interpolation`: how its library resizes position embeddings (a name of
    `keras_vit.config.interpolation.INTERPOLATIONS`), unless the file's `Metadata` says otherwise.
    `writes_rope`: `write` records rotary position embeddings and the dropped key bias (DINOv3).
    `writes_naflex`: `write` records a NaFlex model (SigLIP 2).
    `writes_eomt`: `write` records an EoMT segmentation model (`keras_vit.dense.eomt`).
    `block_options`: the block options (`BLOCK_OPTIONS`) `write` records when they differ from
    the default (the others are refused, not written as another model)."""

    name: str
    table: Table
    detect: Callable
    prepare: Optional[Callable] = None
    metadata: Optional[Callable] = None
    write: Optional[Callable] = None
    suffixes: tuple = ()
    folder: bool = False
    export_name: Optional[str] = None
    canonical_keys: bool = False
    interpolation: str = DEFAULT
    writes_rope: bool = False
    writes_naflex: bool = False
    writes_eomt: bool = False
    block_options: tuple = ()

    @property
    def option(self):
        """The user-facing name (`export(format=...)`)."""
        return self.export_name or self.name

    def full_table(self):
        """`table` plus the rows that registered stems define for this format."""
        return self.table + stems.rows(self.name)

    def _keep(self):
        return stems.owns_key if self.canonical_keys else None

    def to_canonical(self, tensors, heads=None, what="checkpoint"):
        """Canonical tensors of `tensors` (in this format's names); raises ValueError naming
        missing and unexpected keys."""
        return self.full_table().to_canonical(tensors, heads, what, keep=self._keep())

    def from_canonical(self, tensors, heads=None, what="checkpoint"):
        """This format's tensors of canonical `tensors`."""
        return self.full_table().from_canonical(tensors, heads, what, keep=self._keep())
