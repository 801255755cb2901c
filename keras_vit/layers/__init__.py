"""Vision Transformer layers, written against `keras.ops` only."""

from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.class_token import ClassToken
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.encoder import Encoder
from keras_vit.layers.layer_scale import LayerScale
from keras_vit.layers.learned_tokens import LearnedTokens
from keras_vit.layers.map_head import MAPHead
from keras_vit.layers.mlp import MLPBlock
from keras_vit.layers.naflex import NaFlexPatchEmbedding, NaFlexPositionEmbedding
from keras_vit.layers.norms import RMSNorm
from keras_vit.layers.patch_dropout import PatchDropout
from keras_vit.layers.patch_embedding import PatchEmbedding
from keras_vit.layers.pooling import TokenPooling
from keras_vit.layers.position_embedding import PositionEmbedding, resize_position_embedding
from keras_vit.layers.sincos_position_embedding import SinCosPositionEmbedding
from keras_vit.layers.swiglu import SwiGLUBlock
from keras_vit.layers.rope import RopePositionEmbedding
from keras_vit.layers.resnet import BottleneckUnit, ResNetStage, ResNetV2Stem, WeightStandardizedConv2D
from keras_vit.layers.token_grid import TokenGrid
from keras_vit.layers.transformer_block import TransformerBlock

__all__ = [
    "BottleneckUnit",
    "ClassToken",
    "DropPath",
    "Encoder",
    "LayerScale",
    "LearnedTokens",
    "MAPHead",
    "MLPBlock",
    "MultiHeadSelfAttention",
    "NaFlexPatchEmbedding",
    "NaFlexPositionEmbedding",
    "PatchDropout",
    "PatchEmbedding",
    "PositionEmbedding",
    "RMSNorm",
    "ResNetStage",
    "ResNetV2Stem",
    "RopePositionEmbedding",
    "SinCosPositionEmbedding",
    "SwiGLUBlock",
    "TokenGrid",
    "TokenPooling",
    "TransformerBlock",
    "WeightStandardizedConv2D",
    "resize_position_embedding",
]
