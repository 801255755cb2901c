"""The Keras text tower of a `TextConfig`: `keras_vit.layers.Encoder` over token + position
embeddings, pooled at one token per text, then projected."""

import os

import keras
import numpy as np

from keras_vit.layers.encoder import Encoder
from keras_vit.text.config import TextConfig
from keras_vit.text.layers import TextEmbedding, TextPooling
from keras_vit.text.reading import assign, keras_weights, read_text_tower
from keras_vit.text.tokenizers import tokenizer_from_folder


def text_transformer(config, name="text_model"):
    """A functional `keras.Model` from `(batch, config.context)` int32 token ids to the
    `(batch, config.projection_dim)` text features (not normalised): the family's
    `get_text_features`. Layers: `embedding`, `encoder` (its `encoder_norm` is the final
    LayerNorm), `pooling`, `projection`."""
    if not isinstance(config, TextConfig):
        raise ValueError(f"config={config!r}: expected a keras_vit.text.TextConfig.")
    ids = keras.Input((config.context,), dtype="int32", name="token_ids")
    tokens = TextEmbedding(config.vocab_size, config.context, config.width, name="embedding")(ids)
    tokens = Encoder(config.depth, config.num_heads, config.mlp_dim, quick_gelu=config.quick_gelu,
                     approximate_gelu=config.approximate_gelu, layer_norm_epsilon=config.layer_norm_epsilon,
                     causal=config.causal, name="encoder")(tokens)
    pooled = TextPooling(config.pooling, config.eos_token_id, name="pooling")(tokens, ids)
    features = keras.layers.Dense(config.projection_dim, use_bias=config.projection_bias, name="projection")(pooled)
    return keras.Model(ids, features, name=name)


def text_from_checkpoint(path):
    """`(text_model, tokenizer, tower)` of the transformers folder `path` (`CLIPModel`,
    `CLIPTextModelWithProjection`, `SiglipModel`, `SiglipTextModel`, `Siglip2Model`, ...): the
    `text_transformer` with the folder's weights, the `Tokenizer` of its files, its `TextTower`."""
    path = os.fspath(path)
    tower = read_text_tower(path)
    model = text_transformer(tower.config)
    assign(model, keras_weights(tower), path)
    tokenizer = tower.tokenizer or tokenizer_from_folder(path, tower.config.family, tower.config.context,
                                                         tower.config.vocab_size)
    return model, tokenizer, tower


def is_text_model(model):
    """Whether `model` is a `text_transformer` (token ids in, text features out)."""
    try:
        return isinstance(model.get_layer("embedding"), TextEmbedding)
    except ValueError:
        return False


def sample_ids(model, count=3, seed=0):
    """`(count, context)` random int32 token ids for `model` (a `text_transformer`), each row with
    its end-of-text token at a random place when the tower pools there."""
    embedding, pooling = model.get_layer("embedding"), model.get_layer("pooling")
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, embedding.vocab_size, (count, embedding.context)).astype(np.int32)
    if pooling.pooling == "eos":
        ids[np.arange(count), rng.integers(1, embedding.context, count)] = pooling.eos_token_id
    return ids
