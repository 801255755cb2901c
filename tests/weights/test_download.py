"""Named checkpoints: the registry, and downloads served from 127.0.0.1 (no network)."""

import functools
import hashlib
import http.server
import os
import shutil
import socket
import threading

import numpy as np
import pytest

import keras_vit
from keras_vit.family_variants import FAMILIES
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
    assert fetch(entry) == path and _leftovers(entry) == ["tiny.npz"]


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
        assert e.variant in keras_vit.list_models(), e
        assert (e.variant, e.name) not in seen, e
        seen.add((e.variant, e.name))
        assert e.url.startswith("https://") and e.file_name.endswith((".npz", ".safetensors"))
        patch = {**VARIANTS, **FAMILIES}.get(e.variant, {"patch_size": 16})["patch_size"]
        assert e.resolution % patch == 0 and e.container in ("npz", "safetensors")
    for variant in ("ViTTi16", "ViTS16", "ViTS32", "ViTB16", "ViTB32", "ViTL16"):
        default = registry.find("imagenet", variant)
        assert (default.name, default.resolution, default.classes) == ("augreg_in21k_ft_in1k_224", 224, 1000)
        assert registry.find("augreg_in21k_ft_in1k_384", variant).resolution == 384
    assert registry.find("imagenet", "ViTL32").name == "orig_in21k_ft_in1k_384"
    orig = registry.find("imagenet21k", "ViTB16")
    assert (orig.classes, orig.representation_size) == (21843, 768)
    assert orig.url == "https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz"
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
    assert "augreg_in21k_ft_in1k_224" in out and "(default: 'imagenet')" in out
    assert "vit_base_patch16_224.augreg2_in21k_ft_in1k" in out and "ViTL16" not in out
    assert main(["list-weights", "ViTL32"]) == 0
    out = capsys.readouterr().out
    assert "orig_in21k_ft_in1k_384" in out and "imagenet21k%2Bimagenet2012/ViT-L_32.npz" in out
    with pytest.raises(ValueError, match="Unknown model 'ViTX'"):
        keras_vit.list_weights("ViTX")


def test_leftovers_of_killed_downloads_are_removed(server, tiny_npz):
    import subprocess
    import sys

    from keras_vit.files import TMP_PREFIX

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
    assert _leftovers(entry) == ["tiny.npz"]


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
    assert _leftovers(HUB_ENTRY) == []  # nothing copied into KERAS_VIT_HOME

    def corrupt(**kwargs):
        (tmp_path / "bad").write_bytes(b"not a checkpoint")
        return str(tmp_path / "bad")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", corrupt)
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
    assert origins == [HUB_ENTRY.url] and _leftovers(HUB_ENTRY) == ["model.safetensors"]
