"""How each library resizes a grid of position embeddings (and, for FlexiViT, a patch
kernel): one declarative entry each, and the convention each checkpoint source gets.

`keras_vit.layers.position_embedding.resize_matrix` turns an entry into a separable resize
matrix. Every convention keeps the prefix (class, distillation) rows as they are and resizes
the patch rows on the grid `(height // patch, width // patch)` of the image, square or not.
Plain Python: the weights readers use it without Keras.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Interpolation:
    """One library's resize. `kernel`: "linear" (triangle) or "cubic" (Keys, with
    `cubic_a`); `align_corners`: the corner samples of both grids coincide (else half-pixel
    centres); `antialias`: when shrinking, the kernel is widened by the ratio of the sizes;
    `clamp`: out-of-range taps read the border row (else the in-range weights are
    normalised to sum to 1); `patch_resize`: the resize whose pseudo-inverse resizes a patch
    kernel (FlexiViT), None: this one; `follows`: the library code it reproduces."""

    kernel: str
    follows: str
    align_corners: bool = False
    antialias: bool = False
    cubic_a: float = -0.75
    clamp: bool = False
    patch_resize: "Interpolation" = None


# big_vision FlexiViT's `resample_patchemb`: tf.image.resize(method="bilinear"), no antialiasing.
TF_BILINEAR = Interpolation("linear", "tf.image.resize(method='bilinear') (big_vision FlexiViT resample_patchemb)")

INTERPOLATIONS = {
    "bilinear": Interpolation(
        "linear", "scipy.ndimage.zoom(order=1): vit_jax checkpoint.py and big_vision models/vit.py resample_posemb",
        align_corners=True, patch_resize=TF_BILINEAR,
    ),
    "bilinear_antialias": Interpolation(
        "linear", "jax.image.resize(method='linear'), antialiased: big_vision FlexiViT at run time",
        antialias=True, patch_resize=TF_BILINEAR,
    ),
    "bicubic": Interpolation(
        "cubic", "torch F.interpolate(mode='bicubic', align_corners=False): transformers ViT, DeiT, DINOv2, SigLIP "
        "interpolate_pos_encoding; KerasHub DINOv2 (on PyTorch)",
        clamp=True, patch_resize=TF_BILINEAR,
    ),
    "bicubic_antialias": Interpolation(
        "cubic", "torch F.interpolate(mode='bicubic', antialias=True): timm resample_abs_pos_embed and "
        "resample_patch_embed; transformers Dinov2WithRegisters",
        antialias=True, cubic_a=-0.5,
    ),
}
DEFAULT = "bilinear"  # the paper's (the original code's), that of models trained here


def check(name):
    """`name` if it names an entry of `INTERPOLATIONS`, else a one-line ValueError."""
    if name not in INTERPOLATIONS:
        raise ValueError(f"Unknown interpolation {name!r}; expected one of {tuple(INTERPOLATIONS)}.")
    return name
