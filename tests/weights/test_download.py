"""Named checkpoints: the registry, and downloads served from 127.0.0.1 (no network)."""

import functools
import hashlib
import json
import http.server
import os
import pathlib
import shutil
import socket
import threading

import numpy as np
import pytest

import keras_vit
from keras_vit.families import FAMILIES
from keras_vit.variants import VARIANTS
from keras_vit.weights import DownloadError, WeightsEntry, fetch, registry
from tests.support.checkpoints import TINY, original_npz_params


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path):
    """Serves `tmp_path / "www"` on 127.0.0.1; yields (folder, base URL)."""
    folder = tmp_path / "www"
    folder.mkdir()
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(folder))
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def tiny_npz(rng, tmp_path):
    path = tmp_path / "tiny.npz"
    np.savez(path, **original_npz_params(rng, **TINY, classes=5))
    return path


def _entry(url, sha256=None, size=None):
    return WeightsEntry("ViTTest", "tiny_test", 32, 5, None, "npz", url, sha256=sha256, size=size)


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _leftovers(entry):
    folder = os.path.dirname(registry.cache_path(entry))
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def test_download_checks_hash_and_caches(server, tiny_npz):
    www, base = server
    shutil.copy(tiny_npz, www / "tiny.npz")
    entry = _entry(f"{base}/tiny.npz", sha256=_sha(tiny_npz), size=tiny_npz.stat().st_size)
    path = fetch(entry)
    assert path == registry.cache_path(entry) and path.startswith(os.environ["KERAS_VIT_HOME"])
    assert open(path, "rb").read() == tiny_npz.read_bytes()
    (www / "tiny.npz").unlink()  # the cached copy is used from now on
    assert fetch(entry) == path and _leftovers(entry) == ["tiny.npz", "tiny.npz.sha256.json"]


def test_hash_mismatch_leaves_nothing(server, tiny_npz):
    www, base = server
    shutil.copy(tiny_npz, www / "tiny.npz")
    entry = _entry(f"{base}/tiny.npz", sha256="0" * 64)
    with pytest.raises(DownloadError, match="file hash does not match the provided value of 0000"):
        fetch(entry)
    assert _leftovers(entry) == []


def test_truncated_download_leaves_nothing(server, tiny_npz):
    www, base = server
    (www / "tiny.npz").write_bytes(tiny_npz.read_bytes()[: tiny_npz.stat().st_size // 2])
    entry = _entry(f"{base}/tiny.npz")  # no known hash: the file is parsed instead
    with pytest.raises(DownloadError, match="corrupt or truncated"):
        fetch(entry)
    assert _leftovers(entry) == []


def test_offline_error_names_url_and_manual_path(tiny_npz, monkeypatch):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    entry = _entry(f"http://127.0.0.1:{port}/tiny.npz")
    target = registry.cache_path(entry)
    with pytest.raises(DownloadError) as info:
        fetch(entry)
    assert entry.url in str(info.value) and target in str(info.value)
    assert _leftovers(entry) == []
    shutil.copy(tiny_npz, target)  # a manually downloaded file is picked up
    monkeypatch.setitem(VARIANTS, "ViTTest", dict(TINY))
    monkeypatch.setattr(registry, "ENTRIES", [entry])
    model = keras_vit.VisionTransformer(**TINY, classes=5, weights="tiny_test")
    assert model.get_layer("head").kernel.shape == (32, 5)


def test_corrupt_cache_entry_is_reported(tiny_npz):
    entry = _entry("http://127.0.0.1:9/tiny.npz")
    target = registry.cache_path(entry)
    os.makedirs(os.path.dirname(target))
    with open(target, "wb") as f:
        f.write(b"PK\x03\x04 truncated")
    with pytest.raises(ValueError, match="Delete .*tiny.npz to download it again"):
        fetch(entry)


def test_registry_entries_are_consistent():
    seen = set()
    for e in registry.entries():
        assert e.variant in keras_vit.list_models() or e in registry.DENSE, e  # EoMT: DINOv2-L at 16 px patches
        assert (e.variant, e.name) not in seen, e
        seen.add((e.variant, e.name))
        head_file = e.name in registry.DENSE_BACKBONES  # DINOv2's segmentation heads: PyTorch files
        assert e.url.startswith("https://") and e.file_name.endswith(".pth" if head_file else (".npz", ".safetensors"))
        patch = {**VARIANTS, **FAMILIES}.get(e.variant, {"patch_size": 16})["patch_size"]
        assert e.resolution % patch == 0 and e.container in (("torch",) if head_file else ("npz", "safetensors"))
    for variant in ("ViTTi16", "ViTS16", "ViTS32", "ViTB16", "ViTB32", "ViTL16"):
        default = registry.find("imagenet", variant)
        assert (default.name, default.resolution, default.classes) == ("augreg_in21k_ft_in1k_224", 224, 1000)
        assert registry.find("augreg_in21k_ft_in1k_384", variant).resolution == 384
    assert registry.find("imagenet", "ViTL32").name == "orig_in21k_ft_in1k_384"
    for variant in ("ViTTi16", "ViTS16", "ViTS32", "ViTB16", "ViTB32", "ViTL16"):  # a trained 21k head
        in21k = registry.find("imagenet21k", variant)
        assert (in21k.name, in21k.classes, in21k.representation_size) == ("augreg_in21k", 21843, None)
    assert registry.find("imagenet21k", "ViTB16").url == (
        "https://storage.googleapis.com/vit_models/augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0.npz")
    orig = registry.find("imagenet21k", "ViTL32")  # no AugReg file: the paper's, its head all zeros
    assert (orig.name, orig.classes, orig.representation_size) == ("orig_in21k", 21843, 1024)
    assert orig.url == "https://storage.googleapis.com/vit_models/imagenet21k/ViT-L_32.npz"
    timm = registry.find("vit_base_patch16_224.augreg2_in21k_ft_in1k")
    assert timm.url == "https://huggingface.co/timm/vit_base_patch16_224.augreg2_in21k_ft_in1k/resolve/main/model.safetensors"
    assert registry.find("ViTB32/augreg_in21k").classes == 21843


def test_list_weights_returns_records_and_the_command_prints_them(capsys):
    from keras_vit.cli import main

    records = keras_vit.list_weights("ViTB16")
    assert all(isinstance(r, WeightsEntry) and r.variant == "ViTB16" for r in records)
    assert {"augreg_in21k_ft_in1k_224", "vit_base_patch16_224.augreg2_in21k_ft_in1k"} <= {r.name for r in records}
    assert {r.variant for r in keras_vit.list_weights()} >= {*VARIANTS, "R50ViTB16"}
    assert capsys.readouterr().out == ""
    assert main(["list-weights", "ViTB16"]) == 0
    out = capsys.readouterr().out
    assert "augreg_in21k_ft_in1k_224" in out and "(weights='imagenet')" in out and "(weights='imagenet21k')" in out
    assert "vit_base_patch16_224.augreg2_in21k_ft_in1k" in out and "ViTL16" not in out
    assert main(["list-weights", "ViTL32"]) == 0
    out = capsys.readouterr().out
    assert "orig_in21k_ft_in1k_384" in out and "imagenet21k%2Bimagenet2012/ViT-L_32.npz" in out
    with pytest.raises(ValueError, match="Unknown model 'ViTX'"):
        keras_vit.list_weights("ViTX")


def test_leftovers_of_killed_downloads_are_removed(server, tiny_npz):
    import subprocess
    import sys

    from keras_vit.utils.files import TMP_PREFIX

    www, base = server
    shutil.copy(tiny_npz, www / "tiny.npz")
    entry = _entry(f"{base}/tiny.npz")
    folder = os.path.dirname(registry.cache_path(entry))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    leftover = os.path.join(folder, f"{TMP_PREFIX}{int(dead.stdout)}-0123abcd.tiny.npz")
    os.makedirs(leftover)  # as a download killed half-way leaves it
    with open(os.path.join(leftover, "tiny.npz"), "wb") as f:
        f.write(tiny_npz.read_bytes()[:100])
    fetch(entry)
    assert _leftovers(entry) == ["tiny.npz", "tiny.npz.sha256.json"]


HUB_ENTRY = WeightsEntry(
    "ViTTest", "tiny_hub", 32, 5, None, "safetensors",
    "https://huggingface.co/timm/tiny_hub.test/resolve/main/model.safetensors",
)


def _safetensors(path):
    from safetensors.numpy import save_file

    save_file({"x": np.zeros(2, np.float32)}, str(path))
    return str(path)


def test_hub_files_go_through_the_hugging_face_cache(monkeypatch, tmp_path):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    calls = []

    def hf_hub_download(**kwargs):
        calls.append(kwargs)
        return _safetensors(tmp_path / "hf_cache_copy.safetensors")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
    monkeypatch.setattr("keras.utils.get_file", lambda **kwargs: pytest.fail("keras.utils.get_file used"))
    assert fetch(HUB_ENTRY) == str(tmp_path / "hf_cache_copy.safetensors")
    assert calls == [dict(repo_id="timm/tiny_hub.test", revision="main", filename="model.safetensors")]
    assert _leftovers(HUB_ENTRY) == ["model.safetensors.sha256.json"]  # only its record in KERAS_VIT_HOME

    def corrupt(**kwargs):
        (tmp_path / "bad").write_bytes(b"not a checkpoint")
        return str(tmp_path / "bad")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", corrupt)  # main moved to another file
    with pytest.raises(ValueError, match="not the file checked when it was first downloaded.*force_download=True"):
        fetch(HUB_ENTRY)
    os.remove(registry.cache_path(HUB_ENTRY) + ".sha256.json")
    with pytest.raises(ValueError, match="unrecognised checkpoint format.*Hugging Face cache's copy"):
        fetch(HUB_ENTRY)

    def offline(**kwargs):
        raise OSError("no network")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(DownloadError, match=f"no network.*put it at {registry.cache_path(HUB_ENTRY)}"):
        fetch(HUB_ENTRY)


def test_hub_files_without_huggingface_hub_use_keras_get_file(monkeypatch, tmp_path):
    import sys

    origins = []

    def get_file(fname, origin, cache_dir, cache_subdir, file_hash=None):
        origins.append(origin)
        return _safetensors(os.path.join(cache_dir, cache_subdir, fname))

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # not importable
    monkeypatch.setattr("keras.utils.get_file", get_file)
    assert fetch(HUB_ENTRY) == registry.cache_path(HUB_ENTRY)
    assert origins == [HUB_ENTRY.url] and _leftovers(HUB_ENTRY) == ["model.safetensors", "model.safetensors.sha256.json"]


def test_a_cached_file_is_checked_once_and_a_changed_one_refused(server, tiny_npz, monkeypatch, capsys):
    """The first use parses and hashes the file and records it; later uses read only its size
    and modification time; a file whose content changed is refused in one line, and
    `force_download=True` (`--redownload`) fetches it again."""
    from keras_vit.weights import download

    www, base = server
    shutil.copy(tiny_npz, www / "tiny.npz")
    entry = _entry(f"{base}/tiny.npz")
    path = fetch(entry)
    record = json.loads(open(path + ".sha256.json").read())
    assert record["sha256"] == _sha(tiny_npz) and record["size"] == tiny_npz.stat().st_size

    with monkeypatch.context() as patched:
        patched.setattr(download, "sha256_of", lambda *args: pytest.fail("re-hashed"))
        patched.setattr(download.containers, "check_complete", lambda *args: pytest.fail("re-parsed"))
        assert fetch(entry) == path
    os.utime(path, ns=(1, 1))  # touched, same content: accepted after hashing, record updated
    assert fetch(entry) == path
    assert json.loads(open(path + ".sha256.json").read())["mtime_ns"] == 1

    other = dict(original_npz_params(np.random.default_rng(9), **TINY, classes=5))
    np.savez(path, **other)  # replaced behind its record
    with pytest.raises(ValueError, match=r"not the file checked when it was first downloaded.*force_download=True"):
        fetch(entry)
    monkeypatch.setattr(registry, "ENTRIES", [entry])
    monkeypatch.setitem(VARIANTS, "ViTTest", dict(TINY))
    from tests.support.commands import fails

    fails(["convert", "ViTTest/tiny_test", www / "out.npz"], capsys, "--redownload")
    assert fetch(entry, force=True) == path and _sha(pathlib.Path(path)) == _sha(tiny_npz)
    assert keras_vit.weights.PretrainedWeights("tiny_test", force_download=True).force_download
    from keras_vit.cli import main

    np.savez(path, **other)
    assert main(["convert", "ViTTest/tiny_test", str(www / "out.npz"), "--redownload"]) == 0
    assert _sha(pathlib.Path(path)) == _sha(tiny_npz)


def test_a_known_size_and_sha256_are_checked_at_first_use(tiny_npz):
    entry = _entry("http://127.0.0.1:9/tiny.npz", sha256="0" * 64)
    target = registry.cache_path(entry)
    os.makedirs(os.path.dirname(target))
    shutil.copy(tiny_npz, target)  # put there by hand
    with pytest.raises(ValueError, match="does not match the expected 0000.*Delete .*tiny.npz"):
        fetch(entry)
    assert not os.path.exists(target + ".sha256.json")
    entry = _entry("http://127.0.0.1:9/tiny.npz", sha256=_sha(tiny_npz), size=tiny_npz.stat().st_size + 1)
    with pytest.raises(ValueError, match=f"has {tiny_npz.stat().st_size} bytes, expected"):
        fetch(entry)


def test_hugging_face_repo_ids_name_entries():
    assert registry.find("google/siglip-so400m-patch14-384").name == "siglip-so400m-patch14-384"
    assert registry.find("google/siglip-base-patch16-224", "SigLIPB16").variant == "SigLIPB16"
    assert registry.find("facebook/dinov2-small").name == "vit_small_patch14_dinov2.lvd142m"
    assert registry.find("facebook/dinov2-with-registers-giant").name == "vit_giant_patch14_reg4_dinov2.lvd142m"
    assert registry.find("facebook/deit-base-distilled-patch16-224").variant == "DeiTB16"
    assert registry.find("google/vit-base-patch16-224").name == "orig_in21k_ft_in1k_224"
    assert registry.find("timm/vit_base_patch16_224.augreg2_in21k_ft_in1k").variant == "ViTB16"
    for repo_id, target in registry.HUB_IDS.items():
        variant, name = target.split("/", 1)
        assert registry.find(repo_id) == registry.find(name, variant), repo_id
    with pytest.raises(ValueError, match="'DINOv2S14/vit_small_patch14_dinov2.lvd142m' are DINOv2S14's; this model is a ViTB16"):
        registry.find("facebook/dinov2-small", "ViTB16")
    with pytest.raises(FileNotFoundError, match="No checkpoint file or folder at google/unknown-model"):
        keras_vit.ViTB16(weights="google/unknown-model")


def test_a_repo_id_loads_its_entry(tiny_npz, monkeypatch):
    entry = _entry("http://127.0.0.1:9/tiny.npz")
    monkeypatch.setitem(VARIANTS, "ViTTest", dict(TINY))
    monkeypatch.setattr(registry, "ENTRIES", [entry])
    monkeypatch.setitem(registry.HUB_IDS, "google/vit-test", "ViTTest/tiny_test")
    os.makedirs(os.path.dirname(registry.cache_path(entry)))
    shutil.copy(tiny_npz, registry.cache_path(entry))
    model = keras_vit.VisionTransformer(**TINY, classes=5, weights="google/vit-test")
    assert model.get_layer("head").kernel.shape == (32, 5)
    assert keras_vit.from_checkpoint("google/vit-test").get_layer("head").kernel.shape == (32, 5)
