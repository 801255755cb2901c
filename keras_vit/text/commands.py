"""`keras-vit zero-shot | embed`: an image-text checkpoint's zero-shot probabilities and features.
Light: the inputs are checked before Keras is imported."""

import json
import os


def _check_images(paths):
    from keras_vit.utils.files import regular_file

    missing = [path for path in paths if not os.path.lexists(path)]
    if missing:
        raise FileNotFoundError(f"No image file {', '.join(missing)}.")
    for path in paths:
        regular_file(path, "as an image")  # a FIFO would block


def _check_weights(path):
    from keras_vit.text.names import NAMES

    if not os.path.isdir(path) and path not in NAMES:
        raise FileNotFoundError(f"--weights {path}: no such folder (a transformers CLIPModel, SiglipModel or "
                                "Siglip2Model folder, an OpenCLIP folder, one ImageTextModel.save wrote) nor a named "
                                "checkpoint (hub ids such as openai/clip-vit-base-patch32; keras_vit.text.names).")


def _zero_shot(args):
    from keras_vit.text.tokenizers import check_labels

    check_labels(args.labels, args.template)
    if not args.images and not args.save_classifier:
        raise ValueError("zero-shot: give image files, or --save-classifier OUT.keras (or both).")
    if args.save_classifier:
        from keras_vit.utils.files import check_target

        if not args.save_classifier.endswith(".keras"):
            raise ValueError(f"--save-classifier {args.save_classifier}: expected a .keras file name.")
        check_target(args.save_classifier)
    _check_images(args.images)
    _check_weights(args.weights)
    from keras_vit.text.image_text import ImageTextModel

    model = ImageTextModel.from_checkpoint(args.weights)
    if args.save_classifier:
        from keras_vit.utils.files import atomic_path

        with atomic_path(args.save_classifier) as tmp:
            model.classifier(args.labels, template=args.template).save(tmp)
        print(f"Wrote the zero-shot classifier of {len(args.labels)} labels to {args.save_classifier}; fine-tune it "
              f"with keras-vit train --weights {args.save_classifier} --data DIR (class folders whose sorted names are in the labels' order).")
    rows = model.zero_shot(args.images, args.labels, template=args.template) if args.images else []
    for path, row in zip(args.images, rows):
        order = sorted(range(len(row)), key=lambda i: -row[i])
        if args.json:
            print(json.dumps({"image": path, "labels": [args.labels[i] for i in order],
                              "probabilities": [float(row[i]) for i in order]}))
            continue
        print(path)
        for rank, i in enumerate(order, 1):
            print(f"  {rank}. {args.labels[i]:<30} {row[i]:.4f}")


def _embed(args):
    from keras_vit.text.tokenizers import check_texts

    if bool(args.images) == (args.text is not None):
        raise ValueError("embed: give image files or --text TEXT..., not both and not neither.")
    if not args.output.endswith(".npy"):
        raise ValueError(f"--output {args.output}: expected a .npy file name.")
    if os.path.lexists(args.output):
        raise FileExistsError(f"--output {args.output} exists; choose a new file.")
    texts = check_texts(args.text) if args.text is not None else None
    if texts is None:
        _check_images(args.images)
    _check_weights(args.weights)
    import numpy as np

    from keras_vit.utils.files import atomic_path
    from keras_vit.text.image_text import ImageTextModel

    model = ImageTextModel.from_checkpoint(args.weights)
    features = model.encode_text(texts) if texts is not None else model.encode_image(args.images)
    with atomic_path(args.output) as tmp, open(tmp, "wb") as handle:
        np.save(handle, features)
    print(f"Wrote {features.shape[0]} {'text' if texts is not None else 'image'} features of width "
          f"{features.shape[1]} to {args.output}.")


def register(subparsers):
    weights_help = ("a transformers CLIPModel / SiglipModel / Siglip2Model / MetaClip2Model folder, an OpenCLIP folder, "
                    "one ImageTextModel.save wrote, or a named checkpoint (a hub id, e.g. openai/clip-vit-base-patch16)")
    zero_shot = subparsers.add_parser("zero-shot", help="probabilities of text labels for image files "
                                      "(CLIP, SigLIP, SigLIP 2)")
    zero_shot.add_argument("images", nargs="*", metavar="IMAGE")
    zero_shot.add_argument("--weights", required=True, metavar="PATH", help=weights_help)
    zero_shot.add_argument("--labels", required=True, nargs="+", metavar="LABEL", help="the candidate labels")
    zero_shot.add_argument("--template", metavar="T", help="each label put in place of {} in T, e.g. 'a photo of a {}.'")
    zero_shot.add_argument("--json", action="store_true", help="one JSON object per image: image, labels and "
                           "probabilities, most probable first")
    zero_shot.add_argument("--save-classifier", metavar="OUT.keras", help="also write the labels' zero-shot "
                           "classifier (the image tower, a head from the text features) as a .keras model that "
                           "keras-vit train --weights fine-tunes")
    zero_shot.set_defaults(func=_zero_shot)

    embed = subparsers.add_parser("embed", help="image or text features of an image-text model, to a .npy file")
    embed.add_argument("images", nargs="*", metavar="IMAGE")
    embed.add_argument("--text", nargs="+", metavar="TEXT", help="texts to embed instead of images")
    embed.add_argument("--weights", required=True, metavar="PATH", help=weights_help)
    embed.add_argument("--output", required=True, metavar="FILE.npy", help="the (N, D) float32 features")
    embed.set_defaults(func=_embed)
