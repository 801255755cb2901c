"""Dense prediction on a keras_vit backbone: EoMT segmentation (`keras_vit.dense.eomt`)."""

from keras_vit.dense.eomt import eomt_model  # noqa: F401
from keras_vit.dense.eomt_postprocess import post_process_semantic_segmentation, semantic_scores  # noqa: F401
