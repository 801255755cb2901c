"""Multi-head attention pooling (big_vision `MAPHead`, timm `AttentionPoolLatent`, transformers'
`Aimv2AttentionPoolingHead`)."""

import keras
from keras import ops

from keras_vit.layers.linear import Linear
from keras_vit.layers.naflex import finite_tokens, poisoned
from keras_vit.layers.mlp import MLPBlock
from keras_vit.layers.sublayer import run


@keras.saving.register_keras_serializable(package="keras_vit")
class MAPHead(keras.layers.Layer):
    """`(batch, tokens, dim)` -> `(batch, dim)`: a learned `probe` attends to the tokens
    (`query` from the probe, `key` / `value` from the tokens, `out`), then
    `y = y + MLP(LayerNorm(y))`. `call(tokens, valid=mask)` pools only the tokens where the
    `(batch, tokens)` mask is True (NaFlex's padding left out); `call(tokens, segments=member)`
    pools each of the `(batch, images, tokens)` boolean `member` rows on its own: `(batch,
    images, dim)`, one vector per image packed in the sequence (`keras_vit.data.packing`; an empty
    row pools all the tokens). `form="aimv2"`: the probe is the query itself (no `query`
    projection) and `y` is returned as it is (no LayerNorm, no MLP)."""

    def __init__(self, num_heads, mlp_dim, approximate_gelu=True, layer_norm_epsilon=1e-6, form="big_vision", **kwargs):
        super().__init__(**kwargs)
        self.form = form
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.approximate_gelu = bool(approximate_gelu)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        policy = self.dtype_policy
        if form != "aimv2":
            self.ln = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, name="ln", dtype=policy)
            self.mlp = MLPBlock(mlp_dim, approximate_gelu=approximate_gelu, name="mlp", dtype=policy)

    def build(self, tokens_shape, valid_shape=None, segments_shape=None):
        input_shape = tokens_shape
        dim = input_shape[-1]
        if dim % self.num_heads:
            raise ValueError(f"Width {dim} is not divisible by num_heads={self.num_heads}.")
        self.probe = self.add_weight(
            name="probe", shape=(1, 1, dim), initializer=keras.initializers.GlorotUniform()
        )
        for name in ("key", "value", "out") if self.form == "aimv2" else ("query", "key", "value", "out"):
            layer = Linear(dim, kernel_initializer=keras.initializers.GlorotUniform(), name=name, dtype=self.dtype_policy)
            layer.build(input_shape)
            setattr(self, name, layer)
        if self.form != "aimv2":
            self.ln.build((None, 1, dim))
            self.mlp.build((None, 1, dim))

    def _finish(self, pooled):
        """`y + MLP(LayerNorm(y))` of the attention's output `y` (big_vision), or `y` (AIMv2)."""
        return pooled if self.form == "aimv2" else pooled + run(self.mlp, run(self.ln, pooled))

    def call(self, tokens, valid=None, segments=None):
        batch, n, dim = ops.shape(tokens)[0], ops.shape(tokens)[1], ops.shape(tokens)[-1]
        heads = self.num_heads
        head_dim = dim // heads
        if segments is not None:  # the other images' tokens taken by selection (`finite_tokens`)
            tokens, bad = finite_tokens(tokens)
        probe = ops.cast(self.probe, tokens.dtype)
        q = ops.reshape(probe if self.form == "aimv2" else run(self.query, probe), (1, heads, head_dim))
        k = ops.reshape(run(self.key, tokens), (batch, n, heads, head_dim))
        v = ops.reshape(run(self.value, tokens), (batch, n, heads, head_dim))
        # the probe broadcast over the batch: LiteRT's form of "hd,bkhd->bhk" merges the batch into the keys
        q = ops.broadcast_to(q * ops.cast(head_dim**-0.5, q.dtype), (batch, heads, head_dim))
        logits = ops.einsum("bhd,bkhd->bhk", q, k)
        logits = ops.cast(logits, "float32")
        if segments is not None:
            return poisoned(self._pool_segments(logits, v, segments), segments, bad)
        if valid is not None:
            logits = ops.where(ops.cast(ops.expand_dims(valid, 1), "bool"), logits, float("-inf"))
        weights = ops.cast(ops.softmax(logits, axis=-1), v.dtype)
        return self._finish(run(self.out, ops.reshape(ops.einsum("bhk,bkhd->bhd", weights, v), (batch, dim))))

    def _pool_segments(self, logits, v, segments):
        segments = ops.cast(segments, "bool")
        segments = ops.logical_or(segments, ops.logical_not(ops.any(segments, axis=-1, keepdims=True)))
        logits = ops.where(segments[:, None], logits[:, :, None, :], float("-inf"))  # (batch, heads, images, n)
        weights = ops.cast(ops.softmax(logits, axis=-1), v.dtype)
        pooled = ops.einsum("bhsk,bkhd->bshd", weights, v)
        shape = ops.shape(pooled)
        return self._finish(run(self.out, ops.reshape(pooled, (shape[0], shape[1], shape[2] * shape[3]))))

    def compute_output_shape(self, tokens_shape, valid_shape=None, segments_shape=None):
        if segments_shape is not None:
            return (tokens_shape[0], segments_shape[1], tokens_shape[-1])
        return (tokens_shape[0], tokens_shape[-1])

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "approximate_gelu": self.approximate_gelu,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "form": self.form,
        }
