"""The original google-research/vision_transformer `.npz` (the canonical layout itself) and
its variants in the wild: an `opt/target/` or `params/` prefix, big_vision / Flax-linen
module names, the scanned layout (one `encoderblock/` with a leading layer axis), a top-level
`pos_embedding` without the class-token row. big_vision's class-token-free models (plain ViT
with `pool_type="gap"`, FlexiViT, the `img/` tower of SigLIP files with its `MAPHead_0`) have
no `cls`, and no position embedding at all with the fixed `posemb="sincos2d"`. Written as a
flat-keyed `.npz`, as `np.savez` writes it. Its checkpoints run the tanh GELU."""

from keras_vit.weights import containers
from keras_vit.weights.canonical import ATTN, BLOCK, DIST, HEAD_DIST, LAYER_SCALE, MAP_KEYS, MLP, POSEMB, QKV, REG, Metadata
from keras_vit.weights.formats.base import Format
from keras_vit.weights.formats.common import with_class_row
from keras_vit.weights.table import Table, pairs

PREFIXES = ("opt/target/", "params/img/", "params/")
LINEN_NAMES = {
    "MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
    "LayerNorm_1": "LayerNorm_2",
    "MlpBlock_0": "MlpBlock_3",
}
_KEYS = (
    "embedding/kernel", "embedding/bias",
    BLOCK + "LayerNorm_0/scale", BLOCK + "LayerNorm_0/bias",
    *(ATTN + f"{n}/{p}" for n in (*QKV, "out") for p in ("kernel", "bias")),
    BLOCK + "LayerNorm_2/scale", BLOCK + "LayerNorm_2/bias",
    *(MLP + f"Dense_{j}/{p}" for j in (0, 1) for p in ("kernel", "bias")),
    "Transformer/encoder_norm/scale", "Transformer/encoder_norm/bias",
)
TABLE = Table(
    pairs(*((k, k) for k in _KEYS))
    + pairs(("pre_logits/kernel", "pre_logits/kernel"), ("pre_logits/bias", "pre_logits/bias"), optional=True)
    + pairs(("head/kernel", "head/kernel"), ("head/bias", "head/bias"), optional=True)
    + pairs(*((k, k) for k in ("cls", POSEMB, DIST, REG, *LAYER_SCALE, *HEAD_DIST)), optional=True)
    + pairs(*((k, k) for k in MAP_KEYS), optional=True)
)


def detect(raw):
    keys = raw.tensors.keys()
    return any(p + "embedding/kernel" in keys or p + "cls" in keys for p in ("", *PREFIXES))


def prepare(raw):
    """The canonical key names of any variant of the original layout."""
    tensors = raw.tensors
    for prefix in PREFIXES:
        if prefix + "embedding/kernel" in tensors or prefix + "cls" in tensors:
            tensors = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
            break
    tensors = dict(tensors)
    scanned = {k: tensors.pop(k) for k in list(tensors) if k.startswith("Transformer/encoderblock/")}
    for key, stacked in scanned.items():
        for i in range(stacked.shape[0]):
            tensors[key.replace("encoderblock/", f"encoderblock_{i}/", 1)] = stacked[i]
    if any("/MultiHeadDotProductAttention_0/" in k for k in tensors if k.startswith("Transformer/encoderblock_")):
        tensors = {
            "/".join(LINEN_NAMES.get(p, p) for p in k.split("/")) if k.startswith("Transformer/encoderblock_") else k: v
            for k, v in tensors.items()
        }
    if "pos_embedding" in tensors:
        posemb = tensors.pop("pos_embedding")
        tensors[POSEMB] = with_class_row(posemb) if "cls" in tensors else posemb
    return tensors


def metadata(raw, tensors):
    query = tensors.get(ATTN.format(i=0) + "query/kernel")
    return Metadata(approximate_gelu=True, num_heads=query.shape[1] if query is not None else None)


def write(path, ckpt):
    ckpt.require_class_token_head("npz")
    containers.write_npz(path, FORMAT.from_canonical(ckpt.tensors, ckpt.num_heads, f"export of {ckpt.path} to npz"))


FORMAT = Format(
    name="original",
    table=TABLE,
    detect=detect,
    prepare=prepare,
    metadata=metadata,
    write=write,
    suffixes=(".npz",),
    export_name="npz",
    canonical_keys=True,
)
