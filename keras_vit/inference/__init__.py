"""Using a trained model: evaluate it on a data set, classify image files with it
(`predict`), export it for serving (TensorFlow SavedModel, ONNX: `serving`). Names are
imported on first use.
"""

from keras_vit.lazy_imports import lazy_package

lazy_package(
    __name__,
    {
        **dict.fromkeys(["evaluate", "predict"], "keras_vit.inference.predict"),
        "load_model": "keras_vit.run_folder",
        "serving": "keras_vit.inference.serving",
    },
)
