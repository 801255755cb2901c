"""Using a trained model: classify image files with it (`predict`), export it for serving
(TensorFlow SavedModel, ONNX, LiteRT, OpenVINO, a PyTorch program: `serving`); `evaluate` is
`keras_vit.evaluation.classification.evaluate`. Names are imported on first use.
"""

from keras_vit.utils.lazy_imports import lazy_package

lazy_package(
    __name__,
    {
        "evaluate": "keras_vit.evaluation.classification",
        "predict": "keras_vit.inference.predict",
        "load_model": "keras_vit.run_folder",
        "serving": "keras_vit.inference.serving",
    },
)
