"""The canonical layout every format converts to and from: the key names of the original
google-research/vision_transformer `.npz` files (SPEC.md section 2), and `Checkpoint`, a
checkpoint in that layout plus what it tells about the model that produced it."""

import dataclasses
import math
import numbers

from keras_vit.utils import limits
from keras_vit.config.fields import check_value
from keras_vit.config.vit_config import ViTConfig
from keras_vit.utils.patch_grid import grid_size_of
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
# The families beyond the paper (SPEC section 7), named as big_vision would: DeiT's distillation
# token and second head, DINOv2's registers, LayerScale after attention / MLP, the MAP head.
DIST, REG = "dist", "reg"
HEAD_DIST = ("head_dist/kernel", "head_dist/bias")
# timm's `fc_norm`: the final LayerNorm on the pooled features, in place of `encoder_norm`.
FC_NORM = ("fc_norm/scale", "fc_norm/bias")
LAYER_SCALE = (BLOCK + "LayerScale_1/scale", BLOCK + "LayerScale_3/scale")
# timm's `qk_norm`: a norm of each head's queries / keys (`scale`, and `bias` for a LayerNorm).
QK_NORM = tuple(ATTN + f"{n}_norm/" for n in ("query", "key"))
# EVA-02's norm of the MLP's hidden features (timm's `scale_mlp`, `mlp.norm`).
MLP_NORM = MLP + "LayerNorm_0/"
# EVA-CLIP's norm of the attention's joined head outputs before `out` (timm's `scale_attn_inner`, `attn.norm`).
ATTN_NORM = ATTN + "out_norm/"
# RoPE-Mixed's learned rotary frequencies `(fx, fy)` of each block, `(2, heads, head_dim // 2)`.
ROPE_FREQS = ATTN + "rope_frequencies"
# AIMv2's norm of the patch embeddings (`patch_norm`): `scale`, and `bias` for a LayerNorm.
EMBEDDING_NORM = "embedding_norm/"
# CLIP's norm of the embedded tokens before the blocks (`pre_norm`) and its bias-free image projection
# `(width, projection_dim)` on the pooled features.
PRE_NORM = "pre_norm/"
PROJECTION = "projection/kernel"
PROJECTION_BIAS = "projection/bias"  # EVA-CLIP's (timm's `head` with its trained bias)
MAP = "MAPHead_0/"
# EoMT's segmentation head (`keras_vit.dense.eomt`; no original npz exists, so named here): the queries joined
# before the last blocks, the class and mask heads, the upscaling blocks, and transformers' `attn_mask_probs` (read,
# not a variable: which of the last blocks attend through the predicted masks).
EOMT = "EoMT/"
EOMT_QUERIES, EOMT_MASK_PROBS = EOMT + "queries", EOMT + "attn_mask_probs"
EOMT_CLASS, EOMT_MASK_MLP, EOMT_UPSCALE = EOMT + "class_head/", EOMT + "mask_head/Dense_{j}/", EOMT + "upscale_{j}/"
MAP_ATTN = MAP + "MultiHeadDotProductAttention_0/"
MAP_KEYS = (
    MAP + "probe",
    *(MAP_ATTN + f"{n}/{p}" for n in (*QKV, "out") for p in ("kernel", "bias")),
    MAP + "LayerNorm_0/scale", MAP + "LayerNorm_0/bias",
    *(MAP + f"MlpBlock_0/Dense_{j}/{p}" for j in (0, 1) for p in ("kernel", "bias")),
)
DEFAULT_SIZE = 224
_QUERY = Template(ATTN + "query/kernel")


# The builder arguments a checkpoint may record besides its tensors: every `ViTConfig` field.
CONFIG_FIELDS = frozenset(f.name for f in dataclasses.fields(ViTConfig))


class Metadata:
    """What a checkpoint records besides its tensors: its attention `num_heads`, its patch `grid`
    `(rows, columns)`, and `options`, builder arguments named as the `ViTConfig` fields they are
    (e.g. `approximate_gelu`, `layer_norm_epsilon`, `rope_theta`, `quick_gelu`, `preprocessing`,
    `interpolation`: how its library resizes the position embeddings); None: not recorded."""

    def __init__(self, num_heads=None, grid=None, **options):
        unknown = sorted(set(options) - CONFIG_FIELDS)
        if unknown:
            raise TypeError(f"Metadata: {unknown} are not ViTConfig fields.")
        self.num_heads, self.grid = num_heads, grid
        self.options = {name: value for name, value in options.items() if value is not None}

    def __getattr__(self, name):
        if name in CONFIG_FIELDS:
            return self.__dict__.get("options", {}).get(name)
        raise AttributeError(name)

    def replace(self, grid=None, **options):
        """A copy with `grid` and `options` (ViTConfig fields) recorded too."""
        return Metadata(self.num_heads, grid or self.grid, **{**self.options, **options})


def _is_count(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1


def check_metadata(meta, path):
    """Raises ValueError (one line naming `path`) unless each value `meta` records is valid: heads
    a whole number >= 1, the grid two of them, each option as its `ViTConfig` field declares."""
    problems = []
    if meta.num_heads is not None and not _is_count(meta.num_heads):
        problems.append(f"num_heads={meta.num_heads!r} (expected a whole number >= 1)")
    if meta.grid is not None and not (
        isinstance(meta.grid, (tuple, list)) and len(meta.grid) == 2 and all(_is_count(n) for n in meta.grid)
    ):
        problems.append(f"a patch grid of {meta.grid!r} (expected two whole numbers >= 1: image size / patch size)")
    for name, value in meta.options.items():
        try:
            check_value(ViTConfig, name, value)
        except ValueError as error:
            problems.append(str(error).rstrip("."))
    if problems:
        raise ValueError(f"{path}: its configuration records {'; '.join(problems)}.")


def check_heads(heads, width, path):
    """Raises ValueError unless `heads` attention heads split the model width `width`."""
    if not _is_count(heads) or width % heads:
        raise ValueError(f"{path}: {heads!r} attention heads cannot split the model width {width} (it must divide it).")


@dataclasses.dataclass
class Checkpoint:
    """`tensors`: canonical key -> LazyArray. `format`: the name of the format it was read
    from ("original", "timm", "hf", "keras", ...). `num_heads`: as stored, or assumed when the
    format has no record of it; `grid`: its patch grid where it records one. `options`: the
    builder arguments it records (`Metadata.options`), also read as attributes (`ckpt.rope_theta`:
    None where it records none); what its keys tell (width, tokens, norms) are properties."""

    path: str
    format: str
    tensors: dict
    num_heads: int = None
    grid: tuple = None
    options: dict = dataclasses.field(default_factory=dict)

    def __getattr__(self, name):
        if name in CONFIG_FIELDS:
            return self.__dict__.get("options", {}).get(name)
        raise AttributeError(name)

    def with_options(self, **options):
        """A copy recording `options` (ViTConfig fields; None: not recorded) too."""
        merged = {**self.options, **options}
        return dataclasses.replace(self, options={k: v for k, v in merged.items() if v is not None})

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
        return (self.shape(MLP.format(i=0) + "Dense_1/kernel") or [None])[0]

    @property
    def mlp(self):
        """"swiglu" when the first MLP layer is twice as wide as the second's input."""
        return "swiglu" if (self.shape(MLP.format(i=0) + "Dense_0/kernel") or [None])[-1] == 2 * self.mlp_dim else "gelu"

    @property
    def class_token(self):
        return "cls" in self.tensors

    @property
    def distillation_token(self):
        return DIST in self.tensors

    @property
    def num_registers(self):
        return self.shape(REG)[1] if REG in self.tensors else 0

    @property
    def position_embedding(self):
        return "rope" if self.rope_theta else "learned" if POSEMB in self.tensors else "sincos2d"

    @property
    def rope_absolute(self):
        """A learned table beside the rotations (EVA-02)."""
        return bool(self.rope_theta) and POSEMB in self.tensors

    @property
    def mlp_norm(self):
        return MLP_NORM.format(i=0) + "scale" in self.tensors

    @property
    def attention_norm(self):
        return ATTN_NORM.format(i=0) + "scale" in self.tensors

    @property
    def layer_scale(self):
        return LAYER_SCALE[0].format(i=0) in self.tensors

    @property
    def qk_norm(self):
        return QK_NORM[0].format(i=0) + "scale" in self.tensors

    @property
    def norm(self):
        """"rmsnorm" where the blocks' norms have a scale and no bias, else "layernorm"."""
        return "layernorm" if BLOCK.format(i=0) + "LayerNorm_0/bias" in self.tensors else "rmsnorm"

    def has_bias(self, key):
        """Whether block 0's layer `key` (e.g. `ATTN + "out/"`) has a bias."""
        return key.format(i=0) + "bias" in self.tensors

    @property
    def fc_norm(self):
        return FC_NORM[0] in self.tensors

    @property
    def pre_norm(self):
        return PRE_NORM + "scale" in self.tensors

    @property
    def patch_bias(self):
        return "embedding/bias" in self.tensors

    @property
    def projection_dim(self):
        return (self.shape(PROJECTION) or [None])[-1]

    @property
    def projection_bias(self):
        return PROJECTION_BIAS in self.tensors

    @property
    def patch_norm(self):
        return EMBEDDING_NORM + "scale" in self.tensors

    @property
    def map_head(self):
        """"aimv2" where the MAP head's probe is its query (no query projection), else "big_vision"."""
        aimv2 = MAP + "probe" in self.tensors and MAP_ATTN + "query/kernel" not in self.tensors
        return "aimv2" if aimv2 else "big_vision"

    @property
    def position_prefix(self):
        """Rows of the position embedding before the patches' (class, distillation token)."""
        return int(self.class_token) + int(self.distillation_token)

    @property
    def inferred_pooling(self):
        """What a head on these keys reads when the file says nothing else: the MAP head's
        output, else the class token (but the mean where the pooled features have the final
        LayerNorm, timm's `fc_norm`), else the mean of the patch tokens."""
        return "map" if MAP + "probe" in self.tensors else "token" if self.class_token and not self.fc_norm else "avg"

    @property
    def head_pooling(self):
        """What the checkpoint's head (or pooled output) reads."""
        return "map" if MAP + "probe" in self.tensors else self.pooling or self.inferred_pooling

    @property
    def classes(self):
        return (self.shape("head/kernel") or [None])[-1]

    @property
    def representation_size(self):
        return (self.shape("pre_logits/kernel") or [None])[-1]

    @property
    def patch_grid(self):
        if POSEMB not in self.tensors:  # fixed sin-cos or rotary embeddings: the file's grid, else 224 px
            return tuple(self.grid or (DEFAULT_SIZE // self.patch_size,) * 2)
        rows = self.shape(POSEMB)[1] - self.position_prefix
        try:
            return grid_size_of(rows, self.grid)
        except ValueError as error:
            raise ValueError(f"{self.tensors[POSEMB].source} of shape {self.shape(POSEMB)}: {error}") from None

    @property
    def stem(self):
        return stems.stem_of_keys(self.tensors)

    def without_head(self):
        """A copy without the classification head (`head`, DeiT's `head_dist`, `pre_logits`): the encoder alone."""
        dropped = {*HEAD, *HEAD_DIST, *PRE_LOGITS}
        return dataclasses.replace(self, tensors={k: v for k, v in self.tensors.items() if k not in dropped})

    def require_class_token_head(self, format_name):
        """Raises ValueError if the head reads other tokens than a head on these keys does in
        `format_name` (the class token if there is one), which would change the logits."""
        if self.classes and self.head_pooling != self.inferred_pooling:
            reads = {"token": "the class token", "avg": "the mean of the patch tokens"}[self.inferred_pooling]
            raise ValueError(
                f"{self.path}: the head reads pooling='{self.head_pooling}'; the {format_name} format's "
                f"head on these weights reads {reads}. Export a model with pooling='{self.inferred_pooling}', "
                "or without its head (keras-vit convert --include-top false; convert_checkpoint(include_top=False))."
            )

    def expected_shapes(self):
        """Canonical key -> the shape the model's architecture gives it (stem keys left out),
        from the width (class token), patch embedding, MLP width, heads and head sizes."""
        width, heads, mlp = self.hidden_dim, self.num_heads, self.mlp_dim
        pooled = self.projection_dim or width  # what pre_logits / the head read
        logits_in = self.representation_size or pooled
        hidden = 2 * mlp if self.mlp == "swiglu" else mlp  # SwiGLU packs gate and value in Dense_0
        shapes = {"cls": (1, 1, width), DIST: (1, 1, width), "embedding/bias": (width,),
                  EMBEDDING_NORM + "scale": (width,), EMBEDDING_NORM + "bias": (width,),
                  PRE_NORM + "scale": (width,), PRE_NORM + "bias": (width,)}
        if self.projection_dim:
            shapes[PROJECTION], shapes[PROJECTION_BIAS] = (width, self.projection_dim), (self.projection_dim,)
        if REG in self.tensors:
            shapes[REG] = (1, self.num_registers, width)
        shapes.update({key: (width,) for key in ("Transformer/encoder_norm/scale", "Transformer/encoder_norm/bias", *FC_NORM)})

        def attention(attn):
            for name in QKV:
                shapes.update({attn + name + "/kernel": (width, heads, width // heads), attn + name + "/bias": (heads, width // heads)})
            shapes.update({attn + "out/kernel": (heads, width // heads, width), attn + "out/bias": (width,)})

        for i in range(self.depth):
            block, mlp_block = BLOCK.format(i=i), MLP.format(i=i)
            for norm in ("LayerNorm_0/", "LayerNorm_2/"):
                shapes.update({block + norm + "scale": (width,), block + norm + "bias": (width,)})
            shapes.update({key.format(i=i): (width,) for key in LAYER_SCALE})
            attention(ATTN.format(i=i))
            shapes.update({norm.format(i=i) + p: (width // heads,) for norm in QK_NORM for p in ("scale", "bias")})
            shapes[ROPE_FREQS.format(i=i)] = (2, heads, width // heads // 2)
            shapes.update({mlp_block + "Dense_0/kernel": (width, hidden), mlp_block + "Dense_0/bias": (hidden,)})
            shapes.update({mlp_block + "Dense_1/kernel": (mlp, width), mlp_block + "Dense_1/bias": (width,)})
            shapes.update({MLP_NORM.format(i=i) + p: (mlp,) for p in ("scale", "bias")})
            shapes.update({ATTN_NORM.format(i=i) + p: (width,) for p in ("scale", "bias")})
        attention(MAP_ATTN)  # the MAP head: a probe token, attention, LayerNorm and a GELU MLP of the blocks' width
        shapes.update({MAP + "probe": (1, 1, width), MAP + "LayerNorm_0/scale": (width,), MAP + "LayerNorm_0/bias": (width,)})
        shapes.update({MAP + "MlpBlock_0/Dense_0/kernel": (width, mlp), MAP + "MlpBlock_0/Dense_0/bias": (mlp,),
                       MAP + "MlpBlock_0/Dense_1/kernel": (mlp, width), MAP + "MlpBlock_0/Dense_1/bias": (width,)})
        if self.representation_size:
            shapes.update({"pre_logits/kernel": (pooled, self.representation_size), "pre_logits/bias": (self.representation_size,)})
        if self.classes:
            for kernel, bias in (HEAD, HEAD_DIST):
                shapes.update({kernel: (logits_in, self.classes), bias: (self.classes,)})
        return shapes

    def check(self):
        """Raises ValueError (one line) unless every tensor has the shape the architecture
        gives it and the recorded grid fits the position embeddings; reads no tensor data,
        so a file declaring impossible or inflated sizes is refused before it is read. Every
        format's reader hands its tensors to the builder and the writers through here: each
        tensor real floating point and not empty, each shape the one the architecture of the
        patch embedding, heads and MLP gives it, the model within `keras_vit.utils.limits`."""
        for key, tensor in self.tensors.items():
            if tensor.dtype.kind != "f" or not all(tensor.shape):
                raise ValueError(
                    f"{self.path}: tensor {key!r} ({tensor.source}) is {tensor.dtype} of shape {tensor.shape}; "
                    "accepted: non-empty float16, bfloat16, float32 or float64 weights."
                )
        if "embedding/kernel" not in self.tensors:
            raise ValueError(f"{self.path}: no 'embedding/kernel' tensor; keras_vit's ViT needs one.")
        kernel = self.shape("embedding/kernel")
        if len(kernel) != 4 or kernel[0] != kernel[1]:
            raise ValueError(f"{self.path}: patch embedding kernel of shape {kernel}; expected (patch, patch, channels, width).")
        width = kernel[-1]
        check_heads(self.num_heads, width, self.path)
        if REG in self.tensors and (len(self.shape(REG)) != 3 or self.shape(REG)[0] != 1):
            raise ValueError(f"{self.path}: register tokens of shape {self.shape(REG)}; expected (1, registers, {width}).")
        if POSEMB in self.tensors:
            posemb, prefix = self.shape(POSEMB), self.position_prefix
            if len(posemb) != 3 or posemb[0] != 1 or posemb[2] != width or posemb[1] <= prefix:
                raise ValueError(f"{self.path}: position embeddings of shape {posemb}; expected (1, tokens, {width}).")
            if self.grid is not None and self.grid[0] * self.grid[1] != posemb[1] - prefix:
                raise ValueError(
                    f"{self.path}: its configuration gives a {self.grid[0]}x{self.grid[1]} patch grid, but the "
                    f"position embeddings hold {posemb[1] - prefix} patches."
                )
        for key, expected in self.expected_shapes().items():
            found = self.shape(key)
            if found is not None and tuple(found) != tuple(expected):
                raise ValueError(
                    f"{self.path}: tensor {key!r} has shape {tuple(found)}; the architecture it declares "
                    f"(width {width}, {self.num_heads} heads, MLP width {self.mlp_dim}) needs {tuple(expected)}."
                )
        limits.check_model_size(
            self.path, width=width, depth=self.depth, mlp_dim=self.mlp_dim or 0,
            tokens=self.shape(POSEMB)[1] if POSEMB in self.tensors else math.prod(self.grid or ()), classes=self.classes or 0,
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
            class_token=self.class_token,
            distillation_token=self.distillation_token,
            distillation_head=HEAD_DIST[0] in self.tensors,
            num_registers=self.num_registers,
            position_embedding=self.position_embedding,
            layer_scale_init=1.0 if self.layer_scale else None,
            mlp=self.mlp,
            fc_norm=self.fc_norm,
            qkv_bias=self.has_bias(ATTN + "query/"),
            proj_bias=self.has_bias(ATTN + "out/"),
            mlp_bias=self.has_bias(MLP + "Dense_0/"),
            qk_norm=self.qk_norm,
            norm=self.norm,
            **({"rope_theta": self.rope_theta} if self.rope_theta else {}),
            **({"key_bias": False} if self.key_bias is False else {}),
            **({"naflex": True} if self.naflex else {}),
            **({"rope_form": self.rope_form} if self.rope_form not in (None, "dinov3") else {}),
            patch_norm=self.patch_norm,
            map_head=self.map_head,
            sincos_form=self.sincos_form or "big_vision",
            **({"rope_absolute": True} if self.rope_absolute else {}),
            **({"rope_indexing": self.rope_indexing} if self.rope_indexing not in (None, "xy") else {}),
            **({"rope_reference_grid": tuple(self.rope_reference_grid)} if self.rope_reference_grid else {}),
            **({"mlp_norm": True} if self.mlp_norm else {}),
            attention_norm=self.attention_norm,
            rope_offset=float(self.rope_offset or 0.0),
            map_heads=self.map_heads if self.map_heads and self.map_heads != self.num_heads else None,
            pre_norm=self.pre_norm,
            patch_bias=self.patch_bias,
            projection_dim=self.projection_dim,
            projection_bias=self.projection_bias,
            unit_features=bool(self.unit_features),
        )


def known_num_heads(hidden_dim):
    """The head count of the named models of width `hidden_dim` (`list_models()`: the paper's
    and the families', which agree on it, e.g. 16 for SigLIP So400m's 1152), else None: no
    guess from the width alone (So400m's heads are 72 wide, not 64)."""
    from keras_vit.families import FAMILIES

    counts = {arch["num_heads"] for arch in (*VARIANTS.values(), *FAMILIES.values()) if arch["hidden_dim"] == hidden_dim}
    return counts.pop() if len(counts) == 1 else None
