"""The extension point for hybrid stems (a CNN that feeds the patch embedding).

A `StemLayout` says which canonical (original npz) keys belong to a stem, which layer class
holds it in a model, and, for each format other than the original (whose keys are canonical
already), the key-table rows of its weights (`keras_vit.weights.table.Row`). Example, a stem
whose canonical `conv_root/kernel` timm calls `patch_embed.backbone.stem.conv.weight`::

    from keras_vit.weights.table import Row
    from keras_vit.weights.transforms import conv_to_canonical, conv_from_canonical

    register_stem(StemLayout(
        name="my_resnet", layer_class=MyStem, canonical_prefixes=("conv_root/", "block1/"),
        rows={
            "timm": (Row("conv_root/kernel", "patch_embed.backbone.stem.conv.weight",
                         conv_to_canonical, conv_from_canonical, optional=True), ...),
            "keras": (Row("conv_root/kernel", "stem/conv_root/kernel", optional=True), ...),
        },
    ))

The "keras" rows map the variable paths of the stem layer (named "stem" in a model). The
built-in BiT ResNet of R50+ViT-B/16 is registered here; its rows are part of the format
modules' own tables. Nothing here imports Keras (`layer_class` may be given as
"module:Class", imported when a model is at hand).
"""

import dataclasses
import importlib


@dataclasses.dataclass(frozen=True)
class StemLayout:
    """How a stem's weights are named. `rows`: format name -> key-table rows of its weights
    in that format. `variant`: the name its named checkpoints are registered under."""

    name: str
    layer_class: object
    canonical_prefixes: tuple
    rows: dict = dataclasses.field(default_factory=dict)
    variant: str = None

    def owns(self, canonical_key):
        return canonical_key.startswith(self.canonical_prefixes)

    def layer_type(self):
        if isinstance(self.layer_class, str):
            module, _, name = self.layer_class.partition(":")
            return getattr(importlib.import_module(module), name)
        return self.layer_class


BIT_RESNET = StemLayout(
    name="bit_resnet",
    layer_class="keras_vit.layers.resnet:ResNetV2Stem",
    canonical_prefixes=("conv_root/", "gn_root/") + tuple(f"block{i}/" for i in range(1, 10)),
    variant="R50ViTB16",
)

# The registered stems; `register_stem` adds others.
_STEMS = [BIT_RESNET]


def register_stem(layout):
    """Registers (or replaces, by name) a `StemLayout`."""
    _STEMS[:] = [s for s in _STEMS if s.name != layout.name] + [layout]


def stem_of_keys(canonical_keys):
    """The registered stem whose keys appear in a canonical checkpoint, or None."""
    return next((s for s in _STEMS if any(s.owns(k) for k in canonical_keys)), None)


def stem_of_layer(layer):
    """The registered stem layout of a stem layer, or None."""
    return next((s for s in _STEMS if isinstance(layer, s.layer_type())), None)


def owns_key(canonical_key):
    """Whether a registered stem owns the canonical key."""
    return any(s.owns(canonical_key) for s in _STEMS)


def rows(format_name):
    """The key-table rows that registered stems define for the format `format_name`."""
    return tuple(row for s in _STEMS for row in s.rows.get(format_name, ()))
