"""Dense prediction on any keras_vit backbone: semantic segmentation and depth (imported on first use).

`DenseModel(backbone, head=, task=)` builds the model; the heads are Keras layers (`keras_vit.dense.layers`,
EoMT's in `keras_vit.dense.eomt`); `from_checkpoint` reads transformers' Depth Anything, DPT and EoMT models whole."""

from keras_vit.utils.lazy_imports import lazy_package

_EXPORTS = {
    "DenseModel": "keras_vit.dense.model",
    "LinearHead": "keras_vit.dense.layers",
    "DPTHead": "keras_vit.dense.layers",
    "ResidualConvUnit": "keras_vit.dense.layers",
    "eomt_model": "keras_vit.dense.eomt",
    "post_process_semantic_segmentation": "keras_vit.dense.eomt_postprocess",
    "semantic_scores": "keras_vit.dense.eomt_postprocess",
}
lazy_package(__name__, _EXPORTS)
