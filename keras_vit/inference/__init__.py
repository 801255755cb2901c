"""Using a trained model: evaluate it on a data set, classify image files with it
(`predict`), export it for serving (TensorFlow SavedModel, ONNX: `serving`). Names are
imported on first use.
"""

from keras_vit.lazy_imports import lazy_package

lazy_package(
    __name__,
    {
        **dict.fromkeys(["evaluate", "load_model", "predict"], "keras_vit.inference.predict"),
        "serving": "keras_vit.inference.serving",
    },
)
