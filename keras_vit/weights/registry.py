"""The named pretrained checkpoints: the lookup over the family files' weight entries
(`keras_vit.families`: each family declares its `ENTRIES`, `ALIASES` and `HUB_IDS`, with the
files' licences and preprocessing).

A checkpoint is named by its entry's name for a model ("augreg_in21k_ft_in1k_224" of
`ViTB16`), "Model/name", an alias ('imagenet', 'imagenet21k': each model's first entry of the
alias' list), a Hugging Face repo id of `HUB_IDS` (the same weights, converted, e.g.
"facebook/dinov2-small"), or the repo id its file is downloaded from
("timm/vit_base_patch16_224.augreg2_in21k_ft_in1k").

sha256 and size are recorded where known; none could be downloaded when the tables were
written, so they are None: such files are checked by parsing them completely when first
downloaded, and their size and sha256 recorded then (`download`).
"""

import dataclasses
import os
import re

from keras_vit.families import ALIASES, DENSE, DENSE_BACKBONES, ENTRIES, FAMILIES, HUB_IDS  # noqa: F401  (part of this module's interface)
from keras_vit.families.records import WeightsEntry  # noqa: F401  (part of this module's interface)
from keras_vit.variants import ARCHITECTURE_KEYS, VARIANTS, list_models
from keras_vit.weights import stems

HUB_URL = re.compile(r"https://huggingface\.co/(?P<repo_id>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<filename>.+)")


def hub_repo_id(entry):
    """The Hugging Face repo id `entry`'s file is downloaded from, or None."""
    match = HUB_URL.fullmatch(entry.url)
    return match["repo_id"] if match else None


def _named_by_repo_id(name):
    """"Variant/name" of the entry that the Hugging Face repo id `name` names, or None."""
    if name in HUB_IDS:
        return HUB_IDS[name]
    return next((f"{e.variant}/{e.name}" for e in ENTRIES if hub_repo_id(e) == name), None)


def is_named(source):
    """Whether the string `source` is spelled as a checkpoint name: a name, "Variant/name", or a
    known Hugging Face repo id (else it can only be a path)."""
    return "/" not in source or source.split("/", 1)[0] in list_models() or _named_by_repo_id(source) is not None


def add(entry):
    """Adds a `WeightsEntry` (e.g. for a hybrid variant); replaces one of the same name."""
    ENTRIES[:] = [e for e in ENTRIES if (e.variant, e.name) != (entry.variant, entry.name)] + [entry]


def architecture(variant):
    """The builder arguments of the named model `variant` (its family's options included); {}
    for a hybrid, whose files record their heads."""
    return dict(FAMILIES.get(variant) or VARIANTS.get(variant) or {})


def entries(variant=None):
    """The entries of `variant` (e.g. "ViTB16"), or all."""
    return [e for e in ENTRIES if variant is None or e.variant == variant]


# What tells the named models apart besides the five numbers (a DeiT-B/16 has ViT-B/16's).
# Register tokens do not: DINOv2's `reg4` files are entries of the DINOv2 models.
_OPTIONS = ("class_token", "distillation_token", "position_embedding", "rope_form", "rope_absolute", "mlp",
            "patch_norm", "pre_norm", "attention_norm")


def _signature(args):
    return (*(args[k] for k in ARCHITECTURE_KEYS + _OPTIONS), args["layer_scale_init"] is not None)


def variant_of(config):
    """The name of the named model (`list_models()`) a `ViTConfig` builds (None for a custom
    architecture): its five numbers and its family's options, so that a DeiT-B/16 is not a
    ViT-B/16."""
    if config.stem is not None:
        layout = stems.stem_of_layer(config.stem)
        return layout.variant if layout else None
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    wanted = _signature({f.name: getattr(config, f.name) for f in dataclasses.fields(config)})
    models = {**VARIANTS, **FAMILIES}
    return next((name for name, args in models.items() if _signature({**defaults, **args}) == wanted), None)


def find(name, variant=None):
    """The entry called `name` (or an alias, or a Hugging Face repo id of `HUB_IDS` or of its
    file) for `variant`; without a variant, `name` must be "Variant/name", a repo id, or unique
    among all entries. Raises ValueError listing the choices."""
    spelled = _named_by_repo_id(name) or name
    if "/" in spelled and spelled.split("/", 1)[0] in list_models():
        named_variant, name = spelled.split("/", 1)
        if variant is not None and named_variant != variant:
            raise ValueError(f"Weights {spelled!r} are {named_variant}'s; this model is a {variant}.")
        variant = named_variant
    candidates = entries(variant)
    for wanted in ALIASES.get(name, (name,)):
        matches = [e for e in candidates if e.name == wanted]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise ValueError(f"Checkpoint name {name!r} is ambiguous; use 'Variant/{name}', e.g. {matches[0].variant}/{name}.")
    where = f"for {variant}" if variant else "for this architecture"
    known = ", ".join(sorted({e.name for e in candidates} | ({*ALIASES} if candidates else set())))
    raise ValueError(
        f"Unknown weights {name!r} {where}: not an existing file or folder, nor a named checkpoint"
        + (f" (known: {known}; see keras_vit.list_weights({variant!r}))." if candidates else ".")
    )


def cache_path(entry):
    """Where `entry` is cached (and where a manually downloaded file is picked up)."""
    home = os.environ.get("KERAS_VIT_HOME") or os.path.join(os.path.expanduser("~"), ".keras", "keras_vit")
    return os.path.join(home, entry.variant, entry.name, entry.file_name)


def list_weights(model=None):
    """The named checkpoints (`WeightsEntry` records) of `model` (e.g. "ViTB16"), or of all
    models; `weights_table` formats them as `keras-vit list-weights` prints them."""
    if model is not None and model not in list_models() and not entries(model):
        raise ValueError(f"Unknown model {model!r}; available: {', '.join(list_models())}.")
    return entries(model)


def weights_table(model=None):
    """`list_weights(model)` as a text table, each alias' entry ('imagenet', 'imagenet21k') marked."""
    rows = list_weights(model)
    if not rows:
        return f"(no named checkpoints for {model})"
    marks = {}
    for variant in {e.variant for e in rows}:
        for alias in ALIASES:
            marks.setdefault((variant, _alias_target(variant, alias)), []).append(f"'{alias}'")
    lines = [f"{'model':<14} {'weights':<45} {'res':>4} {'classes':>7} {'pre_logits':>10} {'container':<11} "
             f"{'input':<7} license"]
    for e in rows:
        aliases = marks.get((e.variant, e.name))
        mark = f"  (weights={' or '.join(aliases)})" if aliases else ""
        lines.append(
            f"{e.variant:<14} {e.name:<45} {e.resolution:>4} {e.classes or '-':>7} "
            f"{e.representation_size or '-':>10} {e.container:<11} {e.preprocessing:<7} {e.license}{mark}\n{'':<15}{e.url}"
        )
    return "\n".join(lines)


def _alias_target(variant, alias):
    names = {e.name for e in entries(variant)}
    return next((n for n in ALIASES[alias] if n in names), None)
