"""The extension point for hybrid stems (a CNN that feeds the patch embedding).

A module describing a stem registers a `StemLayout`: which canonical (original npz) keys belong
to the stem, and for each other layout a pair of one-key mapping functions. Example, for the
BiT ResNet of R50+ViT-B/16 (canonical `conv_root/kernel`, timm
`patch_embed.backbone.stem.conv.weight`)::

    def timm_to_npz(key):          # -> (canonical key, transform or None) | None
        if key == "patch_embed.backbone.stem.conv.weight":
            return "conv_root/kernel", lambda a: a.transpose(2, 3, 1, 0)
        ...

    register_stem(StemLayout(
        name="resnetv2_r50", layer_class=ResNetStem, variant="ViTR50B16",
        canonical_prefixes=("conv_root/", "gn_root/", "block1/", "block2/", "block3/"),
        keymaps={"timm": (timm_to_npz, npz_to_timm), "keras": (keras_to_npz, npz_to_keras)},
    ))

Transforms take and return `keras_vit.weights.lazy.LazyArray` (`transpose`, `reshape`, ...).
The "keras" pair maps Keras variable paths (e.g. `stem/conv_root/kernel`) of the stem layer.
Original npz files need no keymap: their stem keys are canonical already.
"""

import dataclasses

from keras_vit.layers.resnet import ResNetV2Stem
from keras_vit.weights import bit_stem


@dataclasses.dataclass(frozen=True)
class StemLayout:
    """How a stem's weights are named. `keymaps`: layout ("timm", "hf", "keras") -> pair
    `(to_canonical, from_canonical)` of functions `key -> (other_key, transform | None) | None`.
    `variant`: the name used to look up its named checkpoints in the registry."""

    name: str
    layer_class: type
    canonical_prefixes: tuple
    keymaps: dict
    variant: str = None

    def owns(self, canonical_key):
        return canonical_key.startswith(self.canonical_prefixes)


# The built-in stems; `register_stem` adds others.
_STEMS = [
    StemLayout(
        name="bit_resnet",
        layer_class=ResNetV2Stem,
        canonical_prefixes=bit_stem.CANONICAL_PREFIXES,
        keymaps={
            "timm": (bit_stem.timm_to_canonical, bit_stem.canonical_to_timm),
            "keras": (bit_stem.keras_to_canonical, bit_stem.canonical_to_keras),
        },
        variant=bit_stem.VARIANT,
    ),
]


def register_stem(layout):
    """Registers (or replaces, by name) a `StemLayout`."""
    _STEMS[:] = [s for s in _STEMS if s.name != layout.name] + [layout]


def stem_of_keys(canonical_keys):
    """The registered stem whose keys appear in a canonical checkpoint, or None."""
    return next((s for s in _STEMS if any(s.owns(k) for k in canonical_keys)), None)


def stem_of_layer(layer):
    """The registered stem layout of a stem layer, or None."""
    return next((s for s in _STEMS if isinstance(layer, s.layer_class)), None)


def keymaps(layout, to_canonical):
    """One-key mapping functions of all registered stems for `layout`."""
    if layout == "original":
        return [_identity(s) for s in _STEMS]
    index = 0 if to_canonical else 1
    return [s.keymaps[layout][index] for s in _STEMS if layout in s.keymaps]


def _identity(stem):
    return lambda key: (key, None) if stem.owns(key) else None
