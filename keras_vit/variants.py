"""The ViT variants as data (paper Table 1; Ti and S from DeiT / "How to train your ViT").

Plain Python, no Keras: the command line lists and checks model names before importing it.
"""

# The five numbers that make a ViT architecture: what every entry of VARIANTS gives.
ARCHITECTURE_KEYS = ("patch_size", "hidden_dim", "depth", "num_heads", "mlp_dim")

VARIANTS = {
    "ViTTi16": dict(patch_size=16, hidden_dim=192, depth=12, num_heads=3, mlp_dim=768),
    "ViTS16": dict(patch_size=16, hidden_dim=384, depth=12, num_heads=6, mlp_dim=1536),
    "ViTS32": dict(patch_size=32, hidden_dim=384, depth=12, num_heads=6, mlp_dim=1536),
    "ViTB16": dict(patch_size=16, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072),
    "ViTB32": dict(patch_size=32, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072),
    "ViTL16": dict(patch_size=16, hidden_dim=1024, depth=24, num_heads=16, mlp_dim=4096),
    "ViTL32": dict(patch_size=32, hidden_dim=1024, depth=24, num_heads=16, mlp_dim=4096),
    "ViTH14": dict(patch_size=14, hidden_dim=1280, depth=32, num_heads=16, mlp_dim=5120),
}

# The LayerNorm epsilon of the original ViT (Flax's default); Hugging Face files may record another.
LAYER_NORM_EPSILON = 1e-6


def variant(name):
    """The architecture of the variant called `name` (e.g. "ViTB16")."""
    if name not in VARIANTS:
        raise ValueError(f"Unknown model {name!r}; available: {', '.join(VARIANTS)}.")
    return dict(VARIANTS[name])

# Builders that are not a plain VisionTransformer of VARIANTS (a CNN stem before the encoder).
HYBRIDS = ("R50ViTB16",)


def list_models():
    """The names of every model builder, e.g. "ViTB16" (`keras_vit.ViTB16`)."""
    from keras_vit.family_variants import FAMILIES

    return [*VARIANTS, *HYBRIDS, *FAMILIES]
