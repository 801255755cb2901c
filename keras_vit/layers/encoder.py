"""The stack of transformer blocks followed by the final LayerNorm."""

import functools
import inspect

import keras

from keras_vit.layers.norms import normalization
from keras_vit.layers.residual import Float32Stream
from keras_vit.layers.sublayer import run
from keras_vit.layers.transformer_block import TransformerBlock

# The options an `Encoder` passes on to every block: the keyword arguments `TransformerBlock` declares.
BLOCK_OPTIONS = tuple(name for name in inspect.signature(TransformerBlock).parameters
                      if name not in ("num_heads", "mlp_dim", "drop_path_rate", "seed", "kwargs"))


@keras.saving.register_keras_serializable(package="keras_vit")
class Encoder(Float32Stream, keras.layers.Layer):
    """`depth` pre-norm blocks (`encoderblock_0...`) and `encoder_norm` (none with
    `final_norm=False`: timm's `fc_norm` models normalise the pooled features instead).

    Stochastic depth rises linearly from 0 in the first block to `drop_path_rate` in the
    last. `call(x, return_attention_weights=True)` also returns the list of each block's
    `(batch, heads, tokens, tokens)` attention weights; `call(x, rope=coordinates)` passes the
    patch coordinates of `position_embedding="rope"` to every block, `call(x, valid=mask)` the
    `(batch, tokens)` mask of the tokens attended to (NaFlex), `call(x, segment_ids=ids)` the
    `(batch, tokens)` segment of each token, attending only within it (packed NaFlex).
    `remat=True` recomputes each block's
    activations in the backward pass instead of keeping them (less memory for about a
    third more compute) when training, through `keras.remat`
    (`jax.checkpoint`, `torch.utils.checkpoint`; `tf.recompute_grad` only for blocks without
    dropout / stochastic depth). The other keyword arguments of `TransformerBlock`
    (`BLOCK_OPTIONS`: dropout, GELU flavour, norm and its epsilon, MLP, LayerScale, biases, query / key
    norms) are passed to every block (`block_options`) and readable as the encoder's attributes;
    `encoder_norm` is of the blocks' `norm`.
    """

    def __init__(self, depth, num_heads, mlp_dim, drop_path_rate=0.0, seed=None, remat=False, final_norm=True,
                 **kwargs):
        block_options = {key: kwargs.pop(key) for key in BLOCK_OPTIONS if key in kwargs}
        super().__init__(**kwargs)
        self.depth = int(depth)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.drop_path_rate = float(drop_path_rate)
        self.seed = seed
        self.remat = bool(remat)
        self.blocks = [
            TransformerBlock(
                num_heads,
                mlp_dim,
                drop_path_rate=drop_path_rate * i / max(self.depth - 1, 1),
                seed=None if seed is None else seed + i,
                name=f"encoderblock_{i}",
                dtype=self.dtype_policy,
                **block_options,
            )
            for i in range(self.depth)
        ]
        block_config = self.blocks[0].get_config()
        self.block_options = {key: block_config[key] for key in block_options}
        for key in BLOCK_OPTIONS:  # readable as the encoder's: encoder.approximate_gelu, encoder.mlp, ...
            setattr(self, key, block_config[key])
        self.final_norm = bool(final_norm)
        self.encoder_norm = normalization(
            self.norm, self.blocks[0].layer_norm_epsilon, "encoder_norm", self.dtype_policy
        ) if self.final_norm else None

    def _rematerialise(self, block):
        """TensorFlow's `recompute_grad` draws new dropout masks when it recomputes (wrong
        gradients), so there only the blocks without dropout or stochastic depth are."""
        if not self.remat:
            return False
        random = block.dropout_rate or block.attention_dropout_rate or block.drop_path_rate
        return not (random and keras.backend.backend() == "tensorflow")

    def build(self, x_shape, rope_shape=None, valid_shape=None, segment_ids_shape=None):
        for block in self.blocks:
            block.build(x_shape)
        if self.encoder_norm is not None:
            self.encoder_norm.build(x_shape)

    def call(self, x, rope=None, valid=None, segment_ids=None, training=None, return_attention_weights=False):
        weights = []
        for block in self.blocks:
            if training and self._rematerialise(block):
                # Through `__call__`, which re-enters the dtype scope when the backward pass
                # recomputes the block (outside this layer's call).
                call = functools.partial(block, rope=rope, valid=valid, segment_ids=segment_ids, training=training,
                                         return_attention_weights=return_attention_weights)
                x = keras.remat(call)(x)
            else:
                x = run(block, x, rope=rope, valid=valid, segment_ids=segment_ids, training=training,
                        return_attention_weights=return_attention_weights)
            if return_attention_weights:
                x, w = x
                weights.append(w)
        if self.encoder_norm is not None:
            x = run(self.encoder_norm, x)
        return (x, weights) if return_attention_weights else x

    def compute_output_shape(self, x_shape, rope_shape=None, valid_shape=None, segment_ids_shape=None):
        return x_shape

    def get_config(self):
        return {
            **super().get_config(),
            "depth": self.depth,
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "drop_path_rate": self.drop_path_rate,
            "seed": self.seed,
            "remat": self.remat,
            "final_norm": self.final_norm,
            **self.block_options,
        }
