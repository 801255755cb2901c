"""The models' inputs: the input pipeline that training and evaluation share (data sources,
`sources`: tf.data, tensorflow-datasets, image folders, arrays, the built-in digits; the
`tf.data` pipelines, `pipeline`, and NaFlex's, `naflex`; augmentation on the host, `augment`,
`randaugment`), and the same in NumPy without TensorFlow: image files to inputs (`images`),
NaFlex inputs (`naflex_inputs`) and their packing (`packing`), ImageNet's scaling and labels
(`imagenet`). Nothing here imports the layers. Names are imported on first use.
"""

from keras_vit.utils.lazy_imports import lazy_package

lazy_package(
    __name__,
    {
        **dict.fromkeys(["DatasetUnavailableError", "Source", "load_source"], "keras_vit.data.sources"),
        **dict.fromkeys(["Augmentation", "eval_dataset", "train_dataset"], "keras_vit.data.pipeline"),
    },
)
