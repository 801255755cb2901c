"""The named models, one file per family, as data: each module of `FAMILY_MODULES` declares

- `MODELS`: its named models, name -> builder arguments (`VisionTransformer`'s, the family's
  options included) plus `input_size` (the default square input) and `preprocessing`;
- `PREPROCESSING`: name -> `records.Preprocessing`, how its checkpoints expect their images;
- `ENTRIES`: its named weights (`records.WeightsEntry`: URL, hash, licence, preprocessing, classes);
- optionally `ALIASES` (alias -> entry names tried in turn, e.g. "imagenet"), `HUB_IDS`
  (a Hugging Face repo id of the same weights -> "Model/entry") and `DENSE` (those of its
  `ENTRIES` that are dense-prediction models, read whole by `keras_vit.dense`), with `DENSE_BACKBONES`
  (a dense entry that holds a head alone -> the "Model/entry" weights of the backbone it was trained on).

Every reader takes them from here: the builders (`keras_vit.applications`), `list_models()`,
`keras-vit list-models` / `list-weights` / `train --model`, the weights registry and
`keras_vit.preprocessing`. Plain Python, no Keras (the command line lists the models before
importing it). A family is one more module here and its line in `FAMILY_MODULES`.
"""

from keras_vit.families import aimv2, clip, deit, dinov2, dinov3, eomt, eva02, pe, rope_vit, siglip, vit

# The paper's first (its models are `VARIANTS`), then the others in the order `list_models()` gives them.
FAMILY_MODULES = (vit, deit, dinov2, dinov3, rope_vit, eva02, siglip, aimv2, clip, pe, eomt)


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


def _entries():
    """Every family's `ENTRIES`; an entry or a model naming a preprocessing no family declares is refused."""
    entries = [entry for module in FAMILY_MODULES for entry in getattr(module, "ENTRIES", ())]
    named = [(f"{e.variant}/{e.name}", e.preprocessing) for e in entries]
    named += [(name, args["preprocessing"]) for name, args in FAMILIES.items() if "preprocessing" in args]
    for name, preprocessing in named:
        if preprocessing not in PREPROCESSING:
            raise ValueError(f"{name}: preprocessing={preprocessing!r} is declared by no family's PREPROCESSING.")
    return entries


ENTRIES = _entries()
# The dense-prediction checkpoints among them (a family's `DENSE`): folders `keras_vit.dense` reads whole.
DENSE = [entry for module in FAMILY_MODULES for entry in getattr(module, "DENSE", ())]
DENSE_BACKBONES = _merged("DENSE_BACKBONES")
HUB_IDS = _merged("HUB_IDS")


def _aliases():
    """alias -> the entry names of every family's `ALIASES`, in the order of `FAMILY_MODULES`."""
    aliases = {}
    for module in FAMILY_MODULES:
        for alias, names in getattr(module, "ALIASES", {}).items():
            aliases[alias] = aliases.get(alias, ()) + tuple(names)
    return aliases


ALIASES = _aliases()


def family_of(model):
    """The family module that declares the named model `model` (e.g. `families.dinov2`), or None."""
    return next((m for m in FAMILY_MODULES if model in getattr(m, "MODELS", {}) or model in getattr(m, "HYBRIDS", ())),
                None)


def model_table():
    """The named models as a Markdown table (docs/families.md, `python scripts/update_docs.py`):
    family, shape, default input, preprocessing, how many named weights and their licences."""
    lines = ["| model | family | patch | width | depth | heads | MLP | input | preprocessing | named weights | licences |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, args in {**VARIANTS, **FAMILIES}.items():
        entries = [e for e in ENTRIES if e.variant == name]
        licences = ", ".join(sorted({e.license for e in entries})) or "-"
        preprocessing = args.get("preprocessing") or "vit"
        lines.append(f"| `{name}` | {family_of(name).__name__.rsplit('.', 1)[-1]} | {args['patch_size']} | "
                     f"{args['hidden_dim']} | {args['depth']} | {args['num_heads']} | {args['mlp_dim']} | "
                     f"{args.get('input_size', 224)} | {preprocessing} | {len(entries)} | {licences} |")
    return "\n".join(lines)
