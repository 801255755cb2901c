"""Builders of the named models of the families beyond the paper (`family_variants.FAMILIES`)."""

from keras_vit.applications.vision_transformer import VisionTransformer
from keras_vit.family_variants import FAMILIES


def _family_builder(name):
    entry = dict(FAMILIES[name])
    size = entry.pop("input_size")
    include_top_default = entry.pop("include_top", True)

    def builder(include_top=include_top_default, weights=None, input_tensor=None, input_shape=None, **kwargs):
        args = {**entry, **kwargs}
        if input_shape is None and input_tensor is None and weights is None:
            input_shape = (size, size, 3)
        return VisionTransformer(
            include_top=include_top,
            weights=weights,
            input_tensor=input_tensor,
            input_shape=input_shape,
            name=args.pop("name", name.lower()),
            **args,
        )

    builder.__name__ = builder.__qualname__ = name
    builder.__doc__ = (
        f"{name}: width {entry['hidden_dim']}, depth {entry['depth']}, {entry['num_heads']} heads, MLP "
        f"{entry['mlp_dim']}, patch {entry['patch_size']}, {size} px by default.\n\n"
        "Takes the arguments of `VisionTransformer` (they override the family's)."
    )
    return builder


for _name in FAMILIES:
    globals()[_name] = _family_builder(_name)
