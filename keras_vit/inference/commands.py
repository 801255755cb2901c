"""`keras-vit predict | export`: using a trained model."""

import os
import sys


def _predict(args):
    from keras_vit.data.imagenet import check_top
    from keras_vit.inference.predict import predict

    check_top(args.top)
    from keras_vit.utils.files import regular_file

    missing = [path for path in args.images if not os.path.lexists(path)]
    if missing:
        raise FileNotFoundError(f"No image file {', '.join(missing)}.")
    for path in args.images:
        regular_file(path, "as an image")  # a FIFO would block
    model, names, crop = _model_of(args.model, args.weights)
    from keras_vit.inspect.model_parts import dense_task

    if dense_task(model) is not None:
        return _predict_dense(model, args)
    for path, best in zip(args.images, predict(model, args.images, class_names=names, top=args.top, crop_fraction=crop,
                                              model_path=args.model)):
        print(path)
        for rank, (index, name, prob) in enumerate(best, 1):
            print(f"  {rank}. {name:<30} {prob:.4f}  (class {index})")


def _model_of(source, weights):
    """`load_model`'s `(model, class names, crop)`; a folder is a run folder (its best, else final
    `.keras`) or a checkpoint folder, and a named dense checkpoint (`registry.DENSE`) is fetched as
    one (`keras_vit.from_checkpoint`: a dense model whole)."""
    from keras_vit.inference.predict import load_model
    from keras_vit.run_folder import BEST, FINAL

    from keras_vit.dense.reading import dense_entry

    if not os.path.isdir(source) and dense_entry(source) is None:
        return load_model(source, weights)
    saved = [os.path.join(source, name) for name in (BEST, FINAL) if os.path.isfile(os.path.join(source, name))]
    if saved:
        return load_model(saved[0], weights)
    import keras_vit

    return keras_vit.from_checkpoint(source), None, 1.0


def _predict_dense(model, args):
    """A dense model's maps: PNGs in --out-dir, or the raw maps (--output, --json); nothing written on bad input."""
    import json

    from keras_vit.dense.predict import depth_png, png_names, predict_maps, save_raw, write_png

    if args.output is not None and not args.output.endswith((".npy", ".npz")):
        raise ValueError(f"--output {args.output}: expected a name ending in .npy or .npz.")
    scale = _depth_scale(args)
    pngs = png_names(args.images, args.out_dir) if args.output is None and not args.json else []
    task, maps = predict_maps(model, args.images)
    if args.depth_scale is not None and task != "depth":
        raise ValueError(f"--depth-scale is for a depth model; {args.model} segments.")
    if args.json:
        for path, value in zip(args.images, maps):
            print(json.dumps({"image": path, "task": task, "size": list(value.shape),
                              "depth" if task == "depth" else "classes": value.tolist()}))
    if args.output is not None:
        save_raw(args.output, args.images, maps)
        print(f"Wrote the raw {'depth' if task == 'depth' else 'class'} maps of {len(maps)} image(s) to {args.output}.")
    for path, png, value in zip(args.images, pngs, maps):
        write_png(png, depth_png(value, args.bits, scale) if task == "depth" else value, task)
        print(f"{path} -> {png}")


def _depth_scale(args):
    """The depth PNGs' scale: `--depth-scale`, else the `depth_scale` of the depth run `--model` is
    (a run folder or a `.keras` file beside its `config.json`) with 16-bit PNGs, else None (normalised)."""
    from keras_vit.dense.data import check_depth_scale
    from keras_vit.run_folder import BEST, metadata

    if args.depth_scale is not None:
        return check_depth_scale(args.depth_scale)
    if not os.path.exists(args.model) or args.bits != 16:
        return None
    config = metadata(os.path.join(args.model, BEST) if os.path.isdir(args.model) else args.model).get("config", {})
    return config.get("depth_scale") if config.get("task") == "depth" else None


# The layouts a LoRA adapter is written in (`keras_vit.lora.adapter.LAYOUTS`), as the output says them.
ADAPTER_LAYOUTS = {"peft": "a PEFT adapter", "kerashub": "a KerasHub LoRA file", "npz": "a keras_vit LoRA file"}


def _peft_base_warning(adapter):
    """Why transformers has no model for the base of the run that wrote `adapter` (its `config.json`
    beside it), or None: PEFT applies an adapter to transformers' `ViTForImageClassification`, whose
    head reads the class token."""
    from keras_vit.run_folder import metadata

    config = metadata(adapter).get("config", {})
    # null: the named model's own (a class token, pooled, for the paper's variants)
    pooling, class_token = config.get("pooling") or "token", config.get("class_token")
    if pooling == "token" and class_token is not False:
        return None
    return (f"warning: the run's base model pools by {pooling!r}{'' if class_token is not False else ' without a class token'}; "
            "transformers' ViTForImageClassification reads the class token, so PEFT on it gives other logits than "
            "this run (keras-vit convert refuses the base for that reason; --include-top false writes its encoder).")


def _export(args):
    if args.tower:
        from keras_vit.text.names import NAMES

        if args.format in ADAPTER_LAYOUTS or not (os.path.isdir(args.model) or args.model in NAMES):
            raise ValueError(f"--tower {args.tower}: MODEL must be an image-text folder (a transformers CLIPModel / "
                             "SiglipModel / Siglip2Model folder, an OpenCLIP folder, one ImageTextModel.save wrote) or a "
                             f"named one, and --format a serving format; got {args.model} with --format {args.format}.")
    if args.format in ADAPTER_LAYOUTS:
        from keras_vit.lora.adapter import convert

        warning = _peft_base_warning(args.model) if args.format == "peft" else None
        loading = convert(args.model, args.output, args.format, overwrite=args.overwrite)
        if warning:
            print(warning, file=sys.stderr)
        print(f"Wrote the LoRA adapter {args.model} as {ADAPTER_LAYOUTS[args.format]} to {args.output}"
              + (f"; KerasHub loads it with {loading}" if loading else "") + ".")
        return
    from keras_vit.inference.serving import (FORMATS, check_output, check_quantize, check_requirements, export,
                                             output_path)
    from keras_vit.inference.serving_card import card_path

    formats = FORMATS if args.format == "all" else tuple(dict.fromkeys(args.format.split(",")))
    unknown = [fmt for fmt in formats if fmt not in FORMATS]
    if unknown:
        raise ValueError(f"--format {args.format}: unknown {', '.join(unknown)}; expected a comma-separated list "
                         f"of {', '.join(FORMATS)}, or all.")
    outputs = {fmt: output_path(fmt, args.output, several=len(formats) > 1) for fmt in formats}
    for fmt, output in outputs.items():  # refuse before writing any
        check_requirements(fmt, not args.no_verify)
        check_quantize(fmt, args.quantize)
        check_output(fmt, output, args.model, args.overwrite, tokenizer=args.tower == "text")
    source = args.model
    if args.tower:
        from keras_vit.inference.image_text_export import export_tower
        from keras_vit.text.image_text import ImageTextModel

        pair = ImageTextModel.from_checkpoint(args.model)
        source = f"the {args.tower} tower of {args.model}"
    for fmt, output in outputs.items():
        print(f"Exporting as {fmt} to {output} (written, then run in its runtime and compared)...", flush=True)
        options = dict(verify_outputs=not args.no_verify, atol=args.atol, overwrite=args.overwrite, quantize=args.quantize)
        error = export_tower(pair, args.tower, fmt, output, **options) if args.tower else export(args.model, fmt, output, **options)
        checked = "" if error is None else f"; outputs match the {args.quantize or 'Keras'} model within {error:.2e}"
        print(f"Exported {source}{f' quantized to {args.quantize}' if args.quantize else ''} as {fmt} to {output}{checked}; "
              f"how to call it: {card_path(output)}.")


def register(subparsers):
    predict = subparsers.add_parser("predict", help="top-5 classes of image files; a dense model's class or depth maps")
    predict.add_argument("images", nargs="+", metavar="IMAGE")
    predict.add_argument(
        "--model", default="ViTB16", metavar="VARIANT|MODEL.keras|FOLDER", help="a .keras model, a run folder, a checkpoint folder or a variant name (default ViTB16)"
    )
    predict.add_argument("--weights", default="imagenet", metavar="NAME|PATH", help="weights of a variant (default imagenet)")
    predict.add_argument("--top", type=int, default=5, metavar="INT", help="classes shown per image (default 5)")
    dense = predict.add_argument_group("dense models (segmentation, depth: a .keras DenseModel, a run folder, or a "
                                       "checkpoint folder keras_vit.from_checkpoint reads)")
    dense.add_argument("--out-dir", default="predictions", metavar="DIR",
                       help="where each image's map goes as DIR/NAME.png: classes colour-coded (palette index = class "
                       "id), depth normalised to the PNG's grey levels (default predictions)")
    dense.add_argument("--bits", type=int, choices=(8, 16), default=16, help="bits of a depth PNG (default 16)")
    dense.add_argument("--depth-scale", type=float, metavar="S", help="a depth PNG holds depth x S (16-bit, clipped "
                       "to 65535; KITTI 256, NYU's millimetres 1000) instead of the normalised depth (default: the "
                       "run's depth_scale, if its config.json has one)")
    dense.add_argument("--json", action="store_true", help="print each image's raw map (class ids or depth) as a "
                       "JSON line instead of writing PNGs")
    dense.add_argument("--output", metavar="FILE.npy|FILE.npz", help="save the raw maps instead of PNGs: .npz one "
                       "array per image (by its path), .npy the images (of one size) stacked")
    predict.set_defaults(func=_predict)

    export = subparsers.add_parser("export", help="export a .keras model for serving (SavedModel, ONNX, LiteRT, "
                                   "OpenVINO, PyTorch program), or a LoRA adapter for PEFT or KerasHub")
    export.add_argument("model", metavar="MODEL.keras|ADAPTER", help="a .keras model; or a LoRA adapter (a run's "
                        "lora.npz, a PEFT adapter folder, a KerasHub .lora.h5) with --format peft, kerashub or npz")
    export.add_argument("--format", default="saved_model,onnx", metavar="FORMATS",
                        help="comma-separated, among saved_model, onnx, litert, openvino, torch; or all "
                        "(default saved_model,onnx); for an adapter one of peft, kerashub, npz")
    export.add_argument("--output", required=True, metavar="PATH", help="output path (with several formats: PATH.savedmodel, "
                        "PATH.onnx, PATH.tflite, PATH.openvino, PATH.pt2)")
    export.add_argument("--atol", type=float, default=1e-4, metavar="FLOAT", help="largest accepted output difference")
    export.add_argument("--no-verify", action="store_true", help="skip loading the export and comparing outputs")
    export.add_argument("--quantize", choices=("int8", "float8", "int4"),
                        help="export the model with its dense layers quantized (Keras' model.quantize); a "
                        "format that does not take the mode is refused before anything is written")
    export.add_argument("--overwrite", action="store_true", help="replace what is at the output path (same kind only)")
    export.add_argument("--tower", choices=("image", "text"), help="MODEL is an image-text folder (CLIP, SigLIP, "
                        "SigLIP 2): export its image tower, or its text tower (token ids in; the tokenizer's files "
                        "copied to OUTPUT.tokenizer/)")
    export.set_defaults(func=_export)
