"""The paper's ViT variants (`families.vit`) and the names of every named model.

Plain Python, no Keras: the command line lists and checks model names before importing it.
"""

from keras_vit.families import FAMILIES, HYBRIDS, VARIANTS  # noqa: F401  (part of this module's interface)

# The five numbers that make a ViT architecture: what every entry of VARIANTS gives.
ARCHITECTURE_KEYS = ("patch_size", "hidden_dim", "depth", "num_heads", "mlp_dim")

# The LayerNorm epsilon of the original ViT (Flax's default); Hugging Face files may record another.
LAYER_NORM_EPSILON = 1e-6


def variant(name):
    """The architecture of the variant called `name` (e.g. "ViTB16")."""
    if name not in VARIANTS:
        raise ValueError(f"Unknown model {name!r}; available: {', '.join(VARIANTS)}.")
    return dict(VARIANTS[name])


def list_models():
    """The names of every model builder, e.g. "ViTB16" (`keras_vit.ViTB16`)."""
    return [*VARIANTS, *HYBRIDS, *FAMILIES]
