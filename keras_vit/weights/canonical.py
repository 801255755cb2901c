"""A checkpoint in the canonical layout (the original npz key names) plus what it tells about
the model that produced it."""

import dataclasses
import logging

from keras_vit.architecture import VARIANTS
from keras_vit.layers.position_embedding import grid_size_of
from keras_vit.weights import families, readers, stems
from keras_vit.weights.layouts import ATTN, LAYOUTS, MLP, POSEMB
from keras_vit.weights.rules import block_count, convert

logger = logging.getLogger("keras_vit.weights")
TANH_GELU_ACTS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_python_tanh")


@dataclasses.dataclass
class Checkpoint:
    """`tensors`: canonical key -> LazyArray. `family`: the layout it was read from
    ("original", "timm", "hf", "keras"). `approximate_gelu`: the GELU it was trained / run
    with (None if unknown). `num_heads`: as stored, or assumed when the layout has no record
    of it. `grid`: the patch grid, if the checkpoint records it. `layer_norm_epsilon`: as
    recorded (None: the usual 1e-6)."""

    path: str
    family: str
    tensors: dict
    approximate_gelu: bool = None
    num_heads: int = None
    grid: tuple = None
    layer_norm_epsilon: float = None

    def shape(self, key):
        return self.tensors[key].shape if key in self.tensors else None

    @property
    def hidden_dim(self):
        return self.shape("embedding/kernel")[-1]

    @property
    def patch_size(self):
        return self.shape("embedding/kernel")[0]

    @property
    def channels(self):
        return self.shape("embedding/kernel")[2]

    @property
    def depth(self):
        return block_count(self.tensors, [ATTN + "query/kernel"])

    @property
    def mlp_dim(self):
        return self.shape(MLP.format(i=0) + "Dense_0/kernel")[-1]

    @property
    def classes(self):
        return (self.shape("head/kernel") or [None])[-1]

    @property
    def representation_size(self):
        return (self.shape("pre_logits/kernel") or [None])[-1]

    @property
    def patch_grid(self):
        rows = self.shape(POSEMB)[1] - 1
        try:
            return grid_size_of(rows, self.grid)
        except ValueError as error:
            raise ValueError(f"{self.tensors[POSEMB].source} of shape {self.shape(POSEMB)}: {error}") from None

    @property
    def stem(self):
        return stems.stem_of_keys(self.tensors)

    def architecture(self):
        """The `VisionTransformer` arguments that rebuild this checkpoint's model."""
        return dict(
            patch_size=self.patch_size,
            hidden_dim=self.hidden_dim,
            depth=self.depth,
            num_heads=self.num_heads,
            mlp_dim=self.mlp_dim,
            representation_size=self.representation_size,
        )


def guess_num_heads(hidden_dim):
    """The head count of the standard variant of that width (else 64-wide heads)."""
    for arch in VARIANTS.values():
        if arch["hidden_dim"] == hidden_dim:
            return arch["num_heads"]
    return max(hidden_dim // 64, 1)


def _width(raw_tensors, family):
    key = {"timm": "cls_token", "hf": "embeddings.cls_token", "keras": "class_token/cls"}[family]
    if key not in raw_tensors:
        raise ValueError(f"Checkpoint has no class token ({key!r}); keras_vit's ViT needs one.")
    return raw_tensors[key].shape[-1]


def _hf_gelu(config):
    act = config.get("hidden_act", "gelu")
    if act in TANH_GELU_ACTS:
        return True
    if act == "gelu":
        return False
    raise ValueError(f"Hugging Face config hidden_act={act!r}: keras_vit's ViT supports GELU (exact or tanh).")


def read_checkpoint(path, num_heads=None):
    """Opens any supported checkpoint at `path` as a canonical `Checkpoint`.

    `num_heads` is used only for layouts that do not record it (timm, `.weights.h5`); by
    default the head count of the standard variant of that width is assumed.
    """
    raw = readers.open_checkpoint(path)
    what = f"checkpoint {raw.path}"
    if raw.container == "keras":
        family, tensors = "keras", raw.tensors
    else:
        family = families.detect_family(raw.tensors)
        if family is None:
            sample = ", ".join(repr(k) for k in sorted(raw.tensors)[:5])
            raise ValueError(
                f"{raw.path}: unrecognised checkpoint layout (keys like {sample}); expected the "
                "original ViT npz, timm, Hugging Face transformers or keras_vit weights."
            )
        tensors = raw.tensors
    approximate_gelu, grid, stored_heads, epsilon = None, None, None, None
    if family == "original":
        tensors, approximate_gelu = families.original(tensors, raw.path), True
    elif family == "timm":
        tensors, approximate_gelu = families.timm(tensors, raw.path), False
    elif family == "hf":
        config = raw.meta.get("hf_config", {})
        tensors = families.hf(tensors, raw.path, config)
        approximate_gelu = _hf_gelu(config)
        stored_heads = config.get("num_attention_heads")
        epsilon = config.get("layer_norm_eps")
        if "image_size" in config and "patch_size" in config:
            size = config["image_size"]
            size = size if isinstance(size, (list, tuple)) else (size, size)
            grid = tuple(s // config["patch_size"] for s in size)
    else:
        approximate_gelu = raw.meta.get("approximate_gelu")
        stored_heads = raw.meta.get("num_heads")
        epsilon = raw.meta.get("layer_norm_epsilon")
    heads = None
    if family != "original":
        heads = stored_heads or num_heads or guess_num_heads(_width(tensors, family))
    tensors = convert(
        tensors, LAYOUTS[family], to_canonical=True, heads=heads,
        keymaps=stems.keymaps(family, to_canonical=True), what=what,
    )
    if family == "original":
        heads = tensors[ATTN.format(i=0) + "query/kernel"].shape[1]
    return Checkpoint(raw.path, family, tensors, approximate_gelu, heads, grid, epsilon)
