"""`keras-vit inspect IMAGE... --model ... --weights ... --out DIR`: the paper's Fig. 6 / 7
panels for a model and some images, as PNG files."""

import os

import numpy as np

from keras_vit.variants import list_models

DEFAULT_SIZE = 224


def _build(model, weights, image_size):
    """The model to inspect: a saved `.keras` model, or a builder of `list_models()` without
    its head, at `image_size` (default 224)."""
    from keras_vit.run_folder import load_model

    if model.endswith(".keras"):
        if weights is not None:
            raise ValueError("--weights cannot be combined with a saved .keras model, which has its own.")
        return load_model(model)[0]
    size = image_size or DEFAULT_SIZE
    return load_model(model, weights, include_top=False, input_shape=(size, size, 3))[0]


def _model_size(model, image_size):
    height, width = model.input.shape[1:3]
    if image_size is not None:
        if height is not None and (height, width) != (image_size, image_size):
            raise ValueError(f"--image-size {image_size} does not match the model's input size {height}x{width}.")
        return image_size, image_size
    return (height or DEFAULT_SIZE, width or DEFAULT_SIZE)


def load_images(paths, size):
    """The images at `paths` as RGB float32 `(n, height, width, 3)` in [0, 255], resized to
    `size` as `predict` and the input pipeline resize (`keras_vit.data.images`)."""
    from keras_vit.data.images import read_image, resize

    return np.stack([resize(read_image(path), size) for path in paths])


def inspect_command(args):
    from keras_vit import inspect
    from keras_vit.data.imagenet import preprocess_input
    from keras_vit.inspect.model_parts import is_naflex

    model = _build(args.model, args.weights, args.image_size)
    if is_naflex(model):
        raise ValueError(f"{args.model} is a NaFlex model (patches of each image at its own aspect ratio), which the "
                         "panels of inspect do not take; keras_vit.features(model, keras_vit.naflex_inputs(...)) gives "
                         "its tokens.")
    if args.weights is None and not args.model.endswith(".keras"):
        print("keras-vit inspect: no --weights given; the pictures show a randomly initialised model.")
    size = _model_size(model, args.image_size)
    pixels = load_images(args.images, size)
    images = preprocess_input(pixels, preprocessing=model)
    written = []

    def save(figure, name):
        written.append(inspect.save_figure(figure, os.path.join(args.out, name)))

    maps = inspect.attention_rollout(model, images)
    save(inspect.plot_attention_rollout(pixels, maps), "attention_rollout.png")
    distances = inspect.mean_attention_distance(model, images)
    save(inspect.plot_mean_attention_distance(distances, image_size=max(size)), "mean_attention_distance.png")
    panels = (
        ("the position-embedding similarity", "position_embedding_similarity.png",
         lambda: inspect.plot_position_embedding_similarity(inspect.position_embedding_similarity(model))),
        ("the embedding filters", "embedding_filters.png",
         lambda: inspect.plot_patch_embedding_components(inspect.patch_embedding_components(model, k=min(28, _rank(model))))),
    )
    for what, name, figure in panels:  # those a model may not have
        try:
            save(figure(), name)
        except ValueError as error:
            print(f"keras-vit inspect: skipping {what}: {error}")
    for path in written:
        print(path)


def _rank(model):
    kernel = model.get_layer("embedding").kernel
    return min(int(np.prod(kernel.shape[:3])), int(kernel.shape[3]))


def register(subparsers):
    parser = subparsers.add_parser(
        "inspect",
        help="draw attention maps, attention distances and embedding pictures (paper Fig. 6, 7)",
        description="Writes attention_rollout.png, mean_attention_distance.png, "
        "position_embedding_similarity.png and (not for hybrids) embedding_filters.png to --out.",
    )
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="image file(s); distances average over all")
    parser.add_argument(
        "--model", default="ViTB16", metavar="NAME|MODEL.keras",
        help=f"a model name ({', '.join(list_models())}) or a saved .keras model (default ViTB16)",
    )
    parser.add_argument("--weights", default=None, metavar="NAME|PATH", help="pretrained weights: a name or checkpoint path")
    parser.add_argument("--image-size", type=int, default=None, metavar="INT", help="input size (default: the model's, or 224)")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder for the PNG files")
    parser.set_defaults(func=inspect_command)
