"""The named models, one file per family, as data: each module of `FAMILY_MODULES` declares

- `MODELS`: its named models, name -> builder arguments (`VisionTransformer`'s, the family's
  options included) plus `input_size` (the default square input) and `preprocessing`;
- `PREPROCESSING`: name -> `records.Preprocessing`, how its checkpoints expect their images;
- `ENTRIES`: its named weights (`records.WeightsEntry`: URL, hash, licence, preprocessing, classes);
- optionally `ALIASES` (alias -> entry names tried in turn, e.g. "imagenet") and `HUB_IDS`
  (a Hugging Face repo id of the same weights -> "Model/entry").

Every reader takes them from here: the builders (`keras_vit.applications`), `list_models()`,
`keras-vit list-models` / `list-weights` / `train --model`, the weights registry and
`keras_vit.preprocessing`. Plain Python, no Keras (the command line lists the models before
importing it). A family is one more module here and its line in `FAMILY_MODULES`.
"""

from keras_vit.families import aimv2, clip, deit, dinov2, dinov3, eomt, eva02, rope_vit, siglip, vit

# The paper's first (its models are `VARIANTS`), then the others in the order `list_models()` gives them.
FAMILY_MODULES = (vit, deit, dinov2, dinov3, rope_vit, eva02, siglip, aimv2, clip, eomt)


def _merged(table):
    """One dict of the families' `table`s; a name declared twice is refused."""
    merged = {}
    for module in FAMILY_MODULES:
        for name, value in getattr(module, table, {}).items():
            if name in merged:
                raise ValueError(f"{module.__name__}: {table} {name!r} is declared by another family too.")
            merged[name] = value
    return merged


VARIANTS = vit.MODELS  # the paper's variants: the five numbers of each
HYBRIDS = vit.HYBRIDS
FAMILIES = {name: args for name, args in _merged("MODELS").items() if name not in VARIANTS}
PREPROCESSING = _merged("PREPROCESSING")
ENTRIES = [entry for module in FAMILY_MODULES for entry in getattr(module, "ENTRIES", ())]
HUB_IDS = _merged("HUB_IDS")
ALIASES = {}
for _module in FAMILY_MODULES:
    for _alias, _names in getattr(_module, "ALIASES", {}).items():
        ALIASES[_alias] = ALIASES.get(_alias, ()) + tuple(_names)


def family_of(model):
    """The family module that declares the named model `model` (e.g. `families.dinov2`), or None."""
    return next((m for m in FAMILY_MODULES if model in getattr(m, "MODELS", {}) or model in getattr(m, "HYBRIDS", ())),
                None)
