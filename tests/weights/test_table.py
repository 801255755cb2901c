"""The declarative weights layer: key templates and tables, the registry of formats (a format
added in a test is detected, converted and exported), and containers' bfloat16 tensors."""

import keras
import ml_dtypes
import numpy as np
import pytest

import keras_vit
from keras_vit.weights import containers, formats
from keras_vit.weights.canonical import ATTN, Metadata
from keras_vit.weights.export import convert_checkpoint
from keras_vit.weights.formats import original
from keras_vit.weights.formats.base import Format
from keras_vit.weights.lazy import LazyArray
from keras_vit.weights.reading import read_checkpoint
from keras_vit.weights.table import Row, Table, Template
from keras_vit.weights.transforms import transpose
from tests.support.checkpoints import TINY, TINY_IMAGE, images, original_npz_params

STAGE_UNIT = "stages.{s-1}.blocks.{u-1}.conv{c}.weight"


def lazy(tensors):
    return {k: LazyArray.wrap(v, k) for k, v in tensors.items()}


def loaded(tensors):
    return {k: v.load() for k, v in tensors.items()}


def test_template_indices_and_offsets():
    template = Template(STAGE_UNIT)
    assert template.match("stages.0.blocks.2.conv3.weight") == {"s": 1, "u": 3, "c": 3}
    assert template.render({"s": 1, "u": 3, "c": 3}) == "stages.0.blocks.2.conv3.weight"
    assert template.match("stages.0.blocks.02.conv3.weight") is None  # not how the index is written
    assert template.match("stages.0.blocks.2.conv3.bias") is None
    assert Template("block{s}/unit{u}/conv{c}/kernel").match("block1/unit1/conv_proj/kernel") is None
    with pytest.raises(ValueError, match="uses an index twice"):
        Template("a{i}.b{i}")
    with pytest.raises(ValueError, match="need the same indices"):
        Row("block{s}/x", "stages.{i}.x")


def test_table_expands_found_indices_both_ways_and_names_what_is_wrong():
    table = Table((
        Row("cls", "cls_token"),
        Row("block{s}/unit{u}/conv{c}/kernel", STAGE_UNIT, transpose, transpose),
        Row("b{i}/w", "layers.{i}.w"),
    ))
    rng = np.random.default_rng(0)
    # Sparse stage / unit / conv indices: stage 1 has units 1-2, stage 2 unit 1, as found.
    theirs = {
        "cls_token": rng.normal(size=(1, 1, 4)),
        "stages.0.blocks.0.conv1.weight": rng.normal(size=(3, 2)),
        "stages.0.blocks.1.conv2.weight": rng.normal(size=(3, 2)),
        "stages.1.blocks.0.conv3.weight": rng.normal(size=(3, 2)),
        "layers.0.w": rng.normal(size=(2,)),
        "layers.1.w": rng.normal(size=(2,)),
    }
    canonical = loaded(table.to_canonical(lazy(theirs)))
    assert sorted(canonical) == [
        "b0/w", "b1/w", "block1/unit1/conv1/kernel", "block1/unit2/conv2/kernel", "block2/unit1/conv3/kernel", "cls",
    ]
    np.testing.assert_array_equal(canonical["block2/unit1/conv3/kernel"], theirs["stages.1.blocks.0.conv3.weight"].T)
    back = loaded(table.from_canonical(lazy(canonical)))
    assert sorted(back) == sorted(theirs)
    for key, value in theirs.items():
        np.testing.assert_array_equal(back[key], value)

    broken = {k: v for k, v in theirs.items() if k != "layers.0.w"}
    broken["stages.0.blocks.0.extra.weight"] = np.zeros(1)
    with pytest.raises(ValueError, match=r"ckpt: missing keys: 'layers.0.w'; keys keras_vit cannot map: "
                                         r"'stages.0.blocks.0.extra.weight'\."):
        table.to_canonical(lazy(broken), what="ckpt")
    with pytest.raises(ValueError, match=r"missing keys: '\(no transformer blocks found\)'"):
        table.to_canonical(lazy({"cls_token": theirs["cls_token"]}))


# ------------------------------------------------------------------ the registry of formats


def _toy_table():
    """The original layout's rows with every key under `toy.` and '/' written as '.'."""
    def toy(templates):
        return tuple("toy." + t.text.replace("/", ".") for t in templates)

    return Table(tuple(Row(tuple(t.text for t in r.canonical), toy(r.theirs), optional=r.optional)
                       for r in original.TABLE.rows))


def _toy_write(path, ckpt):
    containers.write_npz(path, TOY.from_canonical(ckpt.tensors, ckpt.num_heads))


_TOY_QUERY = "toy.Transformer.encoderblock_0.MultiHeadDotProductAttention_1.query.kernel"
TOY = Format(
    name="toy",
    table=_toy_table(),
    detect=lambda raw: any(k.startswith("toy.") for k in raw.tensors),
    metadata=lambda raw, tensors: Metadata(num_heads=tensors[_TOY_QUERY].shape[1]),
    write=_toy_write,
    suffixes=(".toy.npz",),
)


@pytest.fixture
def with_toy(monkeypatch):
    monkeypatch.setattr(formats, "FORMATS", [TOY, *formats.FORMATS])  # undone after the test


def test_a_format_registered_in_the_list_is_detected_converted_and_exported(with_toy, tmp_path, rng):
    params = original_npz_params(rng, **TINY, classes=5)
    np.savez(tmp_path / "plain.npz", **params)
    convert_checkpoint(tmp_path / "plain.npz", tmp_path / "model.toy.npz")  # chosen by its suffix
    with np.load(tmp_path / "model.toy.npz") as toy:
        assert "toy.Transformer.encoderblock_1.MlpBlock_3.Dense_0.kernel" in toy.files
        np.testing.assert_array_equal(toy["toy.cls"], params["cls"])
    ckpt = read_checkpoint(tmp_path / "model.toy.npz")
    assert (ckpt.format, ckpt.num_heads, ckpt.depth) == ("toy", TINY["num_heads"], TINY["depth"])
    np.testing.assert_array_equal(ckpt.tensors[ATTN.format(i=1) + "key/bias"].load(),
                                  params[ATTN.format(i=1) + "key/bias"])
    assert "toy" in formats.export_names()
    convert_checkpoint(tmp_path / "model.toy.npz", tmp_path / "again.npz")
    with np.load(tmp_path / "again.npz") as again:
        assert sorted(again.files) == sorted(params)
    model = keras_vit.VisionTransformer(**TINY, classes=5, weights=str(tmp_path / "model.toy.npz"))
    reference = keras_vit.VisionTransformer(**TINY, classes=5, weights=str(tmp_path / "plain.npz"))
    x = images(rng)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(x)), keras.ops.convert_to_numpy(reference(x)), atol=1e-6)
    keras_vit.weights.export(model, tmp_path / "exported", format="toy")
    with np.load(tmp_path / "exported") as exported:
        np.testing.assert_array_equal(exported["toy.head.bias"], params["head/bias"])


def test_without_the_format_its_files_are_not_recognised(tmp_path, rng):
    params = original_npz_params(rng, **TINY)
    np.savez(tmp_path / "toy.npz", **{"toy." + k.replace("/", "."): v for k, v in params.items()})
    with pytest.raises(ValueError, match=r"unrecognised checkpoint layout .*expected one of the formats original, .*timm, "):
        read_checkpoint(tmp_path / "toy.npz")


# ------------------------------------------------------------------ containers


def _bf16_values(rng):
    return rng.normal(size=(3, 4)).astype(np.float32).astype(ml_dtypes.bfloat16)


def test_bfloat16_tensors_load_as_float32_from_every_container(tmp_path, rng):
    values = _bf16_values(rng)
    expected = values.astype(np.float32)
    np.savez(tmp_path / "a.npz", w=values)
    np.savez_compressed(tmp_path / "b.npz", w=values)
    from safetensors.numpy import save_file

    save_file({"w": values}, str(tmp_path / "c.safetensors"))
    paths = ["a.npz", "b.npz", "c.safetensors"]
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.from_numpy(expected).to(torch.bfloat16)}, tmp_path / "d.pth")
    paths.append("d.pth")
    for name in paths:
        tensor = containers.open_checkpoint(tmp_path / name).tensors["w"]
        assert tensor.dtype == np.float32 and tensor.shape == (3, 4), name
        np.testing.assert_array_equal(tensor.load(), expected, err_msg=name)


def test_safetensors_rows_read_their_part(tmp_path, rng):
    values = rng.normal(size=(6, 2)).astype(np.float32)
    from safetensors.numpy import save_file

    save_file({"w": values}, str(tmp_path / "w.safetensors"))
    tensor = containers.open_checkpoint(tmp_path / "w.safetensors").tensors["w"]
    np.testing.assert_array_equal(tensor.rows(2, 5).load(), values[2:5])
    np.testing.assert_array_equal(tensor.rows(2, 5)[1].load(), values[3])


def test_a_registered_stem_adds_its_rows_to_a_format(monkeypatch, rng):
    from keras_vit.weights import stems
    from keras_vit.weights.formats import timm

    monkeypatch.setattr(stems, "_STEMS", list(stems._STEMS))  # the registration is undone after
    stems.register_stem(stems.StemLayout("toy_stem", object, ("toystem/",), {
        "timm": (Row("toystem/kernel", "toy.stem.weight", transpose, transpose, optional=True),),
    }))
    canonical = original_npz_params(rng, **TINY)
    canonical["toystem/kernel"] = rng.normal(size=(3, 2)).astype(np.float32)
    theirs = loaded(timm.FORMAT.from_canonical(lazy(canonical), TINY["num_heads"]))
    np.testing.assert_array_equal(theirs["toy.stem.weight"], canonical["toystem/kernel"].T)
    back = loaded(timm.FORMAT.to_canonical(lazy(theirs), TINY["num_heads"]))
    assert sorted(back) == sorted(canonical)
    np.testing.assert_array_equal(back["toystem/kernel"], canonical["toystem/kernel"])
    assert original.FORMAT.to_canonical(lazy(canonical)).keys() == canonical.keys()  # canonical names pass


def _fitted(pooling="token"):
    model = keras_vit.VisionTransformer(**TINY, classes=3, pooling=pooling, input_shape=(TINY_IMAGE, TINY_IMAGE, 3))
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(np.zeros((2, TINY_IMAGE, TINY_IMAGE, 3), np.float32), np.zeros(2), epochs=1, verbose=0)
    return model


def test_weights_h5_of_a_trained_model_loads_without_its_optimizer_state(tmp_path, rng):
    model = _fitted()
    model.save_weights(tmp_path / "fitted.weights.h5")  # holds the optimizer's variables too
    keys = containers.open_checkpoint(tmp_path / "fitted.weights.h5").tensors
    assert not [k for k in keys if k.startswith("adam/")]
    loaded_model = keras_vit.VisionTransformer(**TINY, classes=3, weights=str(tmp_path / "fitted.weights.h5"))
    x = images(rng)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded_model(x)), keras.ops.convert_to_numpy(model(x)),
                               atol=1e-6)


def test_a_head_on_average_pooled_tokens_is_kept_or_refused_never_rewired(tmp_path, rng):
    model = _fitted("avg")
    for fmt in ("npz", "timm", "hf"):
        with pytest.raises(ValueError, match=r"pooling='avg'.*reads the class token"):
            keras_vit.weights.export(model, tmp_path / f"out_{fmt}", format=fmt)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    model.save(tmp_path / "avg.keras")
    convert_checkpoint(tmp_path / "avg.keras", tmp_path / "again.keras")
    again = keras.saving.load_model(tmp_path / "again.keras")
    assert again.get_layer("pooling").mode == "avg"
    x = images(rng)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(again(x)), keras.ops.convert_to_numpy(model(x)), atol=1e-6)
    with pytest.raises(ValueError, match=r"pooling='avg'"):
        convert_checkpoint(tmp_path / "avg.keras", tmp_path / "avg.npz")
    headless = keras_vit.VisionTransformer(**TINY, include_top=False, pooling="avg")
    keras_vit.weights.export(headless, tmp_path / "headless.npz")  # no head: nothing to rewire
