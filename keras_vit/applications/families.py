"""Builders of the named models of the families beyond the paper (`keras_vit.families`), one per
entry of `FAMILIES`, generated from the family files (e.g. `DINOv2S14`, `CLIPB16`)."""

from keras_vit.applications.vision_transformer import named_builder, weights_doc
from keras_vit.families import FAMILIES


def _family(name):
    entry = dict(FAMILIES[name])
    size = entry.pop("input_size")
    doc = (f"{name}: width {entry['hidden_dim']}, depth {entry['depth']}, {entry['num_heads']} heads, MLP "
           f"{entry['mlp_dim']}, patch {entry['patch_size']}, {size} px by default.\n\n{weights_doc(name)}\n\n"
           "Takes the arguments of `VisionTransformer` (they override the family's).")
    return named_builder(name, {**entry, "name": name.lower()}, doc, __name__, input_size=size)


globals().update({name: _family(name) for name in FAMILIES})
