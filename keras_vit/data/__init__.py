"""The input pipeline that training and evaluation share: data sources (`sources`: tf.data,
tensorflow-datasets, image folders, arrays, the built-in digits), the `tf.data` pipelines
(`pipeline`), augmentation on the host (`augment`, `randaugment`). Names are imported on
first use.
"""

from keras_vit.lazy_imports import lazy_package

lazy_package(
    __name__,
    {
        **dict.fromkeys(["DatasetUnavailableError", "Source", "load_source"], "keras_vit.data.sources"),
        **dict.fromkeys(["Augmentation", "eval_dataset", "train_dataset"], "keras_vit.data.pipeline"),
    },
)
