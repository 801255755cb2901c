"""Multi-head self-attention on `keras.ops.dot_product_attention`."""

import keras
from keras import ops

from keras_vit.layers.fused_attention import dot_product_attention
from keras_vit.layers.linear import Linear
from keras_vit.layers.naflex import finite_tokens, poisoned
from keras_vit.layers.norms import normalization
from keras_vit.layers.rope import FORMS, THETA, axial_rotation, mixed_frequencies, mixed_rotation, rotate, rotation
from keras_vit.layers.sublayer import run


def _dense_init():
    return keras.initializers.GlorotUniform()


def _causal(tokens, valid=None):
    """The `(1 or batch, tokens, tokens)` pairs a causal mask allows (key <= query), and `valid`
    (None, the `(batch, tokens)` keys or `(batch, tokens, tokens)` pairs) too."""
    positions = ops.arange(tokens)
    allowed = ops.expand_dims(ops.less_equal(positions[None, :], positions[:, None]), 0)
    if valid is None:
        return allowed
    valid = ops.cast(valid, "bool")
    return ops.logical_and(allowed, ops.expand_dims(valid, 1) if len(valid.shape) == 2 else valid)


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Self-attention over `(batch, tokens, dim)` with `num_heads` heads.

    One fused `qkv` projection (kernel `(dim, 3 * dim)`, columns `[q | k | v]`, each
    head-major) and an `out` projection (kernel `(dim, dim)`). The attention itself runs in
    `keras_vit.layers.fused_attention.dot_product_attention`, so the backend's fused / flash
    kernel is used where it has one (in training on JAX GPUs too). `call(x, return_attention_weights=True)` takes the explicit path instead and also
    returns the `(batch, heads, tokens, tokens)` softmax weights (computed in float32); so
    does attention dropout while training.

    `call(x, rope=coordinates)` rotates the queries and keys of the last patch tokens by
    their `(1, patches, 2)` coordinates (`keras_vit.layers.rope`, period `rope_theta`, form
    `rope_form`: "mixed" adds the learned float32 `rope_frequencies` `(2, heads, head_dim / 2)`) before
    the attention; `call(x, valid=valid)` attends only to the keys where the boolean
    `(batch, tokens)` `valid` is True (NaFlex's padding left out); `call(x, segment_ids=ids)`
    lets each token attend only to the tokens of its own segment (the same `(batch, tokens)` id:
    several images packed in one sequence, `keras_vit.data.packing`). `key_bias=False` leaves the
    keys without bias (DINOv3): the `qkv` bias keeps
    its `3 * dim` entries, its key part subtracted again (so no gradient reaches it either).
    `qkv_bias=False` / `proj_bias=False`: the `qkv` / `out` projections without bias.
    `causal=True`: each token attends only to itself and the tokens before it (a text tower's
    causal mask, OpenAI CLIP), besides any `valid` / `segment_ids` mask.
    `qk_norm=True` normalises each head's queries and keys (`q_norm`, `k_norm`: a `norm` over
    the head's `head_dim` channels, shared by the heads, as timm's `Attention(qk_norm=True)`)
    before the rotation. `out_norm=True`: a `norm` of the heads' joined outputs before `out` (`out_norm`,
    over `dim`: EVA-CLIP's sub-LN, timm Eva's `scale_attn_inner`).
    """

    def __init__(self, num_heads, dropout_rate=0.0, seed=None, rope_theta=THETA, key_bias=True, qkv_bias=True,
                 proj_bias=True, qk_norm=False, norm="layernorm", layer_norm_epsilon=1e-6, rope_form="dinov3",
                 causal=False, out_norm=False, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.dropout_rate = float(dropout_rate)
        self.seed = seed
        self.rope_theta = float(rope_theta)
        if rope_form not in FORMS:
            raise ValueError(f"Unknown rope_form={rope_form!r}; expected one of {FORMS}.")
        self.rope_form = rope_form
        self.key_bias = bool(key_bias)
        self.qkv_bias = bool(qkv_bias)
        self.proj_bias = bool(proj_bias)
        self.qk_norm = bool(qk_norm)
        self.causal = bool(causal)
        self.norm = norm
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.q_norm = self.k_norm = None
        if self.qk_norm:
            self.q_norm, self.k_norm = (normalization(norm, self.layer_norm_epsilon, name, self.dtype_policy)
                                        for name in ("q_norm", "k_norm"))
        self.out_norm = normalization(norm, self.layer_norm_epsilon, "out_norm", self.dtype_policy) if out_norm else None
        self.dropout = keras.layers.Dropout(self.dropout_rate, seed=seed, dtype=self.dtype_policy)

    def build(self, input_shape):
        dim = input_shape[-1]
        if dim % self.num_heads:
            raise ValueError(f"Width {dim} is not divisible by num_heads={self.num_heads}.")
        self.head_dim = dim // self.num_heads
        self.qkv = Linear(
            3 * dim, use_bias=self.qkv_bias, kernel_initializer=_dense_init(), name="qkv", dtype=self.dtype_policy
        )
        self.qkv.build(input_shape)
        self.out = Linear(
            dim, use_bias=self.proj_bias, kernel_initializer=_dense_init(), name="out", dtype=self.dtype_policy
        )
        self.out.build(input_shape)
        if self.out_norm is not None:
            self.out_norm.build(input_shape)
        if self.qk_norm:
            self.q_norm.build((None, None, self.num_heads, self.head_dim))
            self.k_norm.build((None, None, self.num_heads, self.head_dim))
        if self.rope_form == "mixed":  # float32 and read as such under mixed precision
            self.rope_frequencies = self.add_weight(
                shape=(2, self.num_heads, self.head_dim // 2), name="rope_frequencies", dtype="float32",
                autocast=False, initializer=lambda shape, dtype=None: mixed_frequencies(
                    self.num_heads, self.head_dim, self.rope_theta, self.seed))
        self.dropout.build(None)  # called through `run`, which does not mark it built

    def _split_heads(self, x):
        batch, tokens = ops.shape(x)[0], ops.shape(x)[1]
        qkv = ops.reshape(run(self.qkv, x), (batch, tokens, 3, self.num_heads, self.head_dim))
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        if not self.key_bias and self.qkv_bias:
            k = k - ops.reshape(ops.cast(self.qkv.bias, k.dtype), (3, self.num_heads, self.head_dim))[1]
        if self.qk_norm:
            q, k = run(self.q_norm, q), run(self.k_norm, k)
        return q, k, v

    def _rotated(self, q, k, coordinates):
        """`q`, `k` with their patch tokens rotated by the `(patches, 2)` coordinates (`rope_form`)."""
        if self.rope_form == "dinov3":
            cos, sin = rotation(coordinates, self.head_dim, self.rope_theta)
        elif self.rope_form == "axial":
            cos, sin = axial_rotation(coordinates, self.head_dim, self.rope_theta)
        else:
            cos, sin = mixed_rotation(coordinates, self.rope_frequencies)
        interleaved = self.rope_form != "dinov3"
        return rotate(q, cos, sin, interleaved), rotate(k, cos, sin, interleaved)

    def _explicit_attention(self, q, k, v, training, valid=None):
        scale = ops.cast(self.head_dim**-0.5, q.dtype)
        logits = ops.cast(ops.einsum("bqhd,bkhd->bhqk", q * scale, k), "float32")
        if valid is not None:
            allowed = valid[:, None, None, :] if len(valid.shape) == 2 else valid[:, None]
            logits = ops.where(ops.cast(allowed, "bool"), logits, float("-inf"))
        weights = ops.softmax(logits, axis=-1)
        dropped = run(self.dropout, ops.cast(weights, q.dtype), training=training)
        return ops.einsum("bhqk,bkhd->bqhd", dropped, v), weights

    def call(self, x, rope=None, valid=None, segment_ids=None, training=None, return_attention_weights=False):
        q, k, v = self._split_heads(x)
        if segment_ids is not None:  # (batch, tokens, tokens): the pairs within one segment
            valid = ops.equal(segment_ids[:, :, None], segment_ids[:, None, :])
        if self.causal:
            valid = _causal(ops.shape(x)[1], valid)
        if rope is not None:
            q, k = self._rotated(q, k, rope[0])
        weights = None
        if segment_ids is not None:  # the other images' keys and values taken by selection
            (k, bad_k), (v, bad_v) = finite_tokens(k), finite_tokens(v)
        if return_attention_weights or (training and self.dropout_rate > 0):
            context, weights = self._explicit_attention(q, k, v, training, valid)
        else:
            context = dot_product_attention(q, k, v, training=bool(training), mask=valid)
        if segment_ids is not None:
            context = poisoned(context, valid, ops.maximum(bad_k, bad_v))
        batch, tokens = ops.shape(x)[0], ops.shape(x)[1]
        context = ops.reshape(context, (batch, tokens, self.num_heads * self.head_dim))
        if self.out_norm is not None:
            context = run(self.out_norm, context)
        out = run(self.out, context)
        return (out, weights) if return_attention_weights else out

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "dropout_rate": self.dropout_rate,
            "seed": self.seed,
            "rope_theta": self.rope_theta,
            "rope_form": self.rope_form,
            "key_bias": self.key_bias,
            "qkv_bias": self.qkv_bias,
            "proj_bias": self.proj_bias,
            "qk_norm": self.qk_norm,
            "causal": self.causal,
            "norm": self.norm,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "out_norm": self.out_norm is not None,
        }
