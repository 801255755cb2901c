"""The canonical layout every format converts to and from: the key names of the original
google-research/vision_transformer `.npz` files (SPEC.md section 2), and `Checkpoint`, a
checkpoint in that layout plus what it tells about the model that produced it."""

import dataclasses
from typing import Optional

from keras_vit.patch_grid import grid_size_of
from keras_vit.variants import VARIANTS
from keras_vit.weights import stems
from keras_vit.weights.table import Template

POSEMB = "Transformer/posembed_input/pos_embedding"
BLOCK = "Transformer/encoderblock_{i}/"
ATTN = BLOCK + "MultiHeadDotProductAttention_1/"
MLP = BLOCK + "MlpBlock_3/"
QKV = ("query", "key", "value")
HEAD = ("head/kernel", "head/bias")
PRE_LOGITS = ("pre_logits/kernel", "pre_logits/bias")
_QUERY = Template(ATTN + "query/kernel")


@dataclasses.dataclass(frozen=True)
class Metadata:
    """What a checkpoint records besides its tensors (None: not recorded). `approximate_gelu`:
    the GELU it was trained / run with; `grid`: its patch grid `(rows, columns)`; `pooling`:
    what its head reads, "token" (the class token) or "avg" (the mean of the patch tokens)."""

    approximate_gelu: Optional[bool] = None
    num_heads: Optional[int] = None
    grid: Optional[tuple] = None
    layer_norm_epsilon: Optional[float] = None
    pooling: Optional[str] = None


@dataclasses.dataclass
class Checkpoint:
    """`tensors`: canonical key -> LazyArray. `format`: the name of the format it was read
    from ("original", "timm", "hf", "keras", ...). `num_heads`: as stored, or assumed when the
    format has no record of it. The other fields are those of `Metadata`."""

    path: str
    format: str
    tensors: dict
    approximate_gelu: bool = None
    num_heads: int = None
    grid: tuple = None
    layer_norm_epsilon: float = None
    pooling: str = None

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
        found = [m["i"] for key in self.tensors for m in [_QUERY.match(key)] if m is not None]
        return max(found) + 1 if found else 0

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

    def require_class_token_head(self, format_name):
        """Raises ValueError if the head reads pooled patch tokens: `format_name`'s reads the
        class token, so writing it there would change the model's logits."""
        if self.pooling == "avg" and self.classes:
            raise ValueError(
                f"{self.path}: the head reads the mean of the patch tokens (pooling='avg'); the "
                f"{format_name} format's head reads the class token. Export a model with "
                "pooling='token', or without its head (include_top=False)."
            )

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
