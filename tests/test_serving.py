"""scripts/serve.py: a trained model served over HTTP (models/inference/serving/). What a user relies on: the
server answers what the Translator gives for the same file, for every family; it batches concurrent
requests without changing anyone's answer; and any upload, however bad, gets a 4xx (or 503 when full)
with a one-line reason while the server goes on serving."""
from __future__ import annotations

import asyncio
import contextlib
import gzip
import io
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import zipfile
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image, ImageOps

from conftest import ROOT, load_script, run_in_process
from data.image_io import read_image, write_image
from helpers import SERVED_FAMILIES, SERVED_INIT, photo, png_bytes, save_run
from models.inference.serving.app import ServedModel, ServerSettings, create_app, load_model
from models.inference.serving.uploads import Limits
from models.inference.translator import Translator

uvicorn = pytest.importorskip("uvicorn")
nib = pytest.importorskip("nibabel")

LIMITS = Limits(max_bytes=2 << 20, max_pixels=512 * 512, max_voxels=64 ** 3)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, unpaired_root) -> dict[str, Path]:
    """A run of each family: CycleGAN trained for an epoch by train.py (8 images of 32 px), the others
    saved untrained by their models' code (what is served does not depend on how weights were reached)."""
    checkpoints = tmp_path_factory.mktemp("serving")
    trained = load_script("train.py").main(["--dataroot", str(unpaired_root), "--name", "cycle_gan",
                                            "--checkpoints_dir", str(checkpoints), *SERVED_FAMILIES["cycle_gan"],
                                            *SERVED_INIT, "--n_epochs", "1", "--n_epochs_decay", "0", "--display_id",
                                            "0", "--num_threads", "0", "--no_html", "--no_progress", "--seed", "0"])
    assert trained == 0
    return {family: checkpoints / family if family == "cycle_gan" else save_run(checkpoints, family, flags)
            for family, flags in SERVED_FAMILIES.items()}


def decoded(response: httpx.Response, tmp_path: Path, name: str = "served.png") -> np.ndarray:
    """The answered file read as the Translator reads files (16 bits kept)."""
    assert response.status_code == 200, response.text
    path = tmp_path / name
    path.write_bytes(response.content)
    return read_image(str(path))


def expected(run: Path, upload: Path, **keywords) -> np.ndarray:
    """What the Translator gives for the same file."""
    direction = keywords.pop("direction", None)
    return Translator.load(run, direction=direction, device="cpu").translate(str(upload), **keywords)


def assert_translated_alike(served_output: np.ndarray, alone: np.ndarray) -> None:
    """A translation that may have shared a batch equals the image's own translation, but for rounding: a
    batched convolution may sum in another order, which moves a value lying within float32 rounding of a
    quantisation step by one step, and no more (0.45 of 10000 values in a 12-image test here)."""
    difference = np.abs(served_output.astype(int) - alone.astype(int))
    assert difference.max() <= 1 and (difference > 0).mean() < 0.001


@contextlib.contextmanager
def served(run: Path | ServedModel, **settings):
    """The app of `run` (a run folder, or a model loaded already) served by uvicorn in a thread on a free port
    of 127.0.0.1; yields its URL."""
    model = run if isinstance(run, ServedModel) else load_model(str(run), ["cpu"])
    app = create_app(model, ServerSettings(LIMITS, **settings))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


# ------------------------------------------------------------------------------------------ what it answers
@pytest.mark.parametrize("family,direction", [("cycle_gan", None), ("cycle_gan", "BtoA"), ("pix2pix", None),
                                              ("cut", None), ("bicycle_gan", None)])
def test_every_family_answers_what_the_translator_gives_for_the_same_file(runs, family, direction, tmp_path):
    upload = tmp_path / "photo.png"
    size = (128, 128) if family == "bicycle_gan" else (36, 52)  # BicycleGAN's U-Net takes multiples of 128
    upload.write_bytes(png_bytes(photo(1, *size)))
    with served(runs[family]) as url:
        params = {"direction": direction} if direction else {}
        answer = httpx.post(f"{url}/translate", params=params, content=upload.read_bytes(), timeout=60)
        assert answer.headers["content-type"] == "image/png"
        assert np.array_equal(decoded(answer, tmp_path), expected(runs[family], upload, direction=direction))
        info = httpx.get(f"{url}/info").json()
    assert info["takes"] == "pictures" and info["directions"] == (["AtoB", "BtoA"] if family == "cycle_gan" else
                                                                  ["BtoA"] if family == "pix2pix" else ["AtoB"])


def test_bicyclegan_samples_come_zipped_reproducible_by_seed_and_a_reference_gives_the_encoded_output(runs, tmp_path):
    run = runs["bicycle_gan"]
    upload, look = tmp_path / "photo.png", tmp_path / "look.png"
    upload.write_bytes(png_bytes(photo(2, 128, 128)))
    look.write_bytes(png_bytes(photo(3, 128, 128)))
    with served(run) as url:
        answers = [httpx.post(f"{url}/translate", params={"n_samples": 3, "seed": 7}, content=upload.read_bytes(),
                              headers={"x-filename": "my photo.png"}, timeout=60) for _ in range(2)]
        assert answers[0].content == answers[1].content  # the same seed, the same samples
        assert answers[0].headers["content-type"] == "application/zip"
        with zipfile.ZipFile(io.BytesIO(answers[0].content)) as archive:
            names = archive.namelist()
            samples = [np.asarray(Image.open(io.BytesIO(archive.read(name)))) for name in names]
        assert names == [f"my_photo_sample{k}.png" for k in range(3)]
        too_many = httpx.post(f"{url}/translate", params={"n_samples": 17}, content=upload.read_bytes(), timeout=60)
        assert too_many.status_code == 400 and "--max_samples" in too_many.json()["error"]
        for sample, want in zip(samples, expected(run, upload, n_samples=3, seed=7)):
            assert np.array_equal(sample, want)
        assert not np.array_equal(samples[0], samples[1])
        encoded = httpx.post(f"{url}/translate", files={"file": ("photo.png", upload.read_bytes()),
                                                        "reference": ("look.png", look.read_bytes())}, timeout=60)
        assert np.array_equal(decoded(encoded, tmp_path), expected(run, upload, reference=str(look)))


def test_unsb_walks_the_steps_asked_for_with_the_noise_of_the_seed_as_the_translator_does(runs, tmp_path):
    run = runs["sb"]
    upload = tmp_path / "photo.png"
    upload.write_bytes(png_bytes(photo(6)))
    with served(run, max_batch=4, batch_timeout_ms=200) as url:
        info = httpx.get(f"{url}/info").json()
        assert info["options"]["steps"] == [1, 100] and info["default_steps"] == 3  # the run's
        asked = [{"seed": 5, "steps": 2}, {"seed": 5, "steps": 2}, {"seed": 6, "steps": 2}, {"seed": 5, "steps": 1}]
        with ThreadPoolExecutor(len(asked)) as pool:  # at once: equal options may share a batch
            answers = list(pool.map(lambda params: httpx.post(f"{url}/translate", params=params,
                                                              content=upload.read_bytes(), timeout=60), asked))
        outputs = [decoded(answer, tmp_path, f"out{k}.png") for k, answer in enumerate(answers)]
        # the two equal requests went through the generator together, the others apart (their own options)
        assert httpx.get(f"{url}/health").json()["largest_batch"] == 2
        plain = decoded(httpx.post(f"{url}/translate", content=upload.read_bytes(), timeout=60), tmp_path)
        refused = {field: httpx.post(f"{url}/translate", params={field: value}, content=upload.read_bytes(), timeout=60)
                   for field, value in (("steps", 0), ("steps", 101), ("n_samples", 2))}
    # an upload has no name of its own: it walks the noise of the seed itself, as a picture handed to the Translator
    picture, translator = read_image(str(upload)), Translator.load(run, device="cpu")
    for params, output in zip(asked, outputs):
        assert_translated_alike(output, translator.translate(picture, **params))
    assert np.array_equal(plain, translator.translate(picture))  # seed 0, the run's 3 steps
    assert np.array_equal(outputs[0], outputs[1])  # the same seed and steps, the same answer
    assert not np.array_equal(outputs[0], outputs[2]) and not np.array_equal(outputs[0], outputs[3])
    for field, answer in refused.items():
        assert answer.status_code == 400 and field in answer.json()["error"], answer.text


def test_a_16_bit_image_comes_back_as_a_16_bit_png_equal_to_the_translator(runs, tmp_path):
    upload = tmp_path / "deep.png"
    write_image(str(upload), np.random.default_rng(4).integers(0, 65536, (40, 44, 1), dtype=np.uint16))
    with served(runs["gray16"]) as url:
        answer = httpx.post(f"{url}/translate", content=upload.read_bytes(), timeout=60)
    output = decoded(answer, tmp_path)
    assert output.dtype == np.uint16 and np.array_equal(output, expected(runs["gray16"], upload))
    assert len(np.unique(output)) > 256  # more than 8 bits of it survive


def test_a_nifti_volume_comes_back_translated_over_its_input_with_a_preview_for_the_page(runs, tmp_path):
    rng = np.random.default_rng(5)
    affine = np.diag([1.5, 2.0, 3.0, 1.0])
    upload = tmp_path / "scan.nii.gz"
    nib.save(nib.Nifti1Image((rng.random((11, 9, 10)) * 1000).astype(np.float32), affine), str(upload))
    with served(runs["volume"]) as url:
        answer = httpx.post(f"{url}/translate", files={"file": ("scan.nii.gz", upload.read_bytes())},
                            data={"response": "json"}, timeout=120)
        assert answer.status_code == 200, answer.text
        picture = httpx.post(f"{url}/translate", content=png_bytes(photo(1)), timeout=60)
    body = answer.json()
    (output_file,) = body["outputs"]
    assert output_file["name"] == "scan.nii.gz" and output_file["media_type"] == "application/gzip"
    path = tmp_path / "out.nii.gz"
    path.write_bytes(__import__("base64").b64decode(output_file["data"]))
    image = nib.load(str(path))
    assert np.allclose(image.affine, affine)  # it lies over its input in a viewer
    assert np.array_equal(np.asarray(image.dataobj), expected(runs["volume"], upload)[0])
    preview = Image.open(io.BytesIO(__import__("base64").b64decode(body["previews"][0])))
    assert preview.mode == "L" and preview.height == 11  # three middle slices side by side
    assert picture.status_code == 415 and "translates volumes" in picture.json()["error"]


# ------------------------------------------------------------------------------------------ batching
def test_concurrent_requests_of_one_size_share_batches_and_each_gets_its_own_translation(runs, tmp_path):
    run = runs["cycle_gan"]
    uploads = [png_bytes(photo(seed)) for seed in range(12)] + [png_bytes(photo(99, 28, 20))]

    async def send_all(url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120) as client:
            return await asyncio.gather(*(client.post(f"{url}/translate", content=body) for body in uploads))

    with served(run, max_batch=4, batch_timeout_ms=200) as url:
        answers = asyncio.run(send_all(url))
        health = httpx.get(f"{url}/health").json()
    assert health["largest_batch"] == 4 and health["batches"] < len(uploads)
    translator = Translator.load(run, device="cpu")
    for body, answer in zip(uploads, answers):
        alone = np.asarray(translator.translate(Image.open(io.BytesIO(body))))
        assert_translated_alike(np.asarray(Image.open(io.BytesIO(answer.content))), alone)


# ------------------------------------------------------------------------------------------ bad uploads
def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height RGB pixels, with one tiny compressed row behind it."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + \
        chunk(b"IEND", b"")


def bmp_header_only(width: int, height: int) -> bytes:
    """A 24-bit BMP whose header declares width x height pixels, with a few bytes of pixels behind it."""
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 2835, 2835, 0, 0)
    pixels = b"\x00" * 64
    return b"BM" + struct.pack("<IHHI", 14 + len(info) + len(pixels), 0, 0, 14 + len(info)) + info + pixels


def nifti_with_huge_header() -> bytes:
    image = nib.Nifti1Image(np.zeros((2, 2, 2), np.float32), np.eye(4))
    header = image.header.copy()
    header.set_data_shape((30000, 30000, 30000))
    return header.binaryblock + b"\x00" * 4 + b"\x00" * 32


BAD = {
    "truncated_png": (lambda: png_bytes(photo(1))[:200], {}, 400, "damaged"),
    "png_bomb_header": (lambda: png_header_only(60000, 60000), {}, 413, "60000x60000"),
    "pickle_named_png": (lambda: __import__("pickle").dumps({"a": 1}), {"x-filename": "photo.png"}, 415,
                         "not a file this server reads"),
    "nifti_huge_header_to_a_picture_model": (nifti_with_huge_header, {}, 415, "translates pictures"),
    # a gzip stream is a .nii.gz only if a NIfTI header is what it holds: a gzipped PNG is named as what it is
    "gzipped_png": (lambda: gzip.compress(png_bytes(photo(1))), {}, 415, "gzip-compressed, but what it holds is not"),
    "json_body": (lambda: b'{"image": "x"}', {"content-type": "application/json"}, 415, "not a file"),
    "empty_body": (lambda: b"", {}, 400, "no file"),
    "too_many_bytes": (lambda: b"\x89PNG\r\n\x1a\n" + b"\x00" * (3 << 20), {}, 413, "more than this server's"),
    "bad_option": (lambda: png_bytes(photo(1)), {}, 400, "direction"),
    # BMP headers (read through PIL, not parsed here): over the server's limit, and past PIL's own
    "bmp_over_max_pixels": (lambda: bmp_header_only(1000, 1000), {}, 413, "1000x1000"),
    "bmp_bomb_header": (lambda: bmp_header_only(60000, 60000), {}, 413, "more pixels than"),
}


@pytest.fixture(scope="module")
def cycle_gan_server(runs):
    """One server for the corpus of bad requests: it must go on serving after each of them."""
    with served(runs["cycle_gan"]) as url:
        yield url


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_upload_gets_its_4xx_with_a_one_line_reason_and_the_server_goes_on(cycle_gan_server, case, tmp_path):
    body, headers, status, words = BAD[case]
    params = {"direction": "sideways"} if case == "bad_option" else {}
    url = cycle_gan_server
    answer = httpx.post(f"{url}/translate", content=body(), headers=headers, params=params, timeout=60)
    assert answer.status_code == status, answer.text
    reason = answer.json()["error"]
    assert words in reason and "\n" not in reason and "Traceback" not in reason
    assert str(tmp_path) not in reason and "/tmp" not in reason  # no server path shown
    assert httpx.get(f"{url}/health").json()["status"] == "ok"
    assert httpx.post(f"{url}/translate", content=png_bytes(photo(1)), timeout=60).status_code == 200


def nifti_bytes(shape: tuple[int, ...], data: bytes = b"", datatype: type = np.float32) -> bytes:
    """A NIfTI-1 file: the header of a `shape` volume of `datatype`, then `data` (none: header only)."""
    header = nib.Nifti1Header()
    header.set_data_dtype(datatype)
    header.set_data_shape(shape)
    header.set_data_offset(352)
    return header.binaryblock + b"\x00" * 4 + data


@pytest.mark.parametrize("case", ["just_over_the_limit", "gzip_bomb", "rgb_voxels"])
def test_a_volume_model_refuses_what_a_nifti_header_declares_before_reading_its_data(runs, case):
    over = (65, 64, 64)  # LIMITS allows 64**3 values
    body, status, words = {
        "just_over_the_limit": (nifti_bytes(over), 413, "--max_voxels"),
        # a header of 8x8x8 floats (2 KiB of data) followed by 200 MiB of zeros: inflated no further than 2 KiB
        "gzip_bomb": (__import__("gzip").compress(nifti_bytes((8, 8, 8), b"\x00" * (200 << 20)), 1), 413,
                      "decompresses to more than"),
        "rgb_voxels": (nifti_bytes((4, 4, 4), b"\x00" * 192, np.dtype([("R", "u1"), ("G", "u1"), ("B", "u1")])), 415,
                       "integers or floats"),
    }[case]
    with served(runs["volume"]) as url:
        answer = httpx.post(f"{url}/translate", content=body, timeout=60)
        assert answer.status_code == status and words in answer.json()["error"], answer.text
        assert httpx.get(f"{url}/health").json()["requests_in_server"] == 0


def test_a_picture_of_a_thousand_bands_is_refused_from_its_header(cycle_gan_server, tmp_path):
    bands = tmp_path / "bands.tif"
    write_image(str(bands), np.zeros((16, 16, 1024), np.uint8))
    answer = httpx.post(f"{cycle_gan_server}/translate", content=bands.read_bytes(), timeout=60)
    assert answer.status_code == 413 and "1024 channels" in answer.json()["error"], answer.text


def test_an_upload_over_the_limit_is_refused_as_it_arrives_whether_chunked_or_a_form(runs):
    def chunks(size: int):
        yield b"\x89PNG\r\n\x1a\n"
        for _ in range(size >> 16):
            yield b"\x00" * (1 << 16)

    with served(runs["cycle_gan"]) as url:
        raw = httpx.post(f"{url}/translate", content=chunks(3 << 20), timeout=60)  # no Content-Length: chunked
        boundary = b"xyzzy"

        def form():
            yield b"--xyzzy\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.png\"\r\n\r\n"
            yield from chunks(9 << 20)
            yield b"\r\n--xyzzy--\r\n"
        multipart = httpx.post(f"{url}/translate", content=form(), timeout=60,
                               headers={"content-type": f"multipart/form-data; boundary={boundary.decode()}"})
        health = httpx.get(f"{url}/health").json()
    assert raw.status_code == 413 and multipart.status_code == 413, (raw.text, multipart.text)
    assert health["requests_in_server"] == 0


def test_a_client_stalling_its_upload_is_answered_408_and_others_are_served(runs):
    import socket
    with served(runs["cycle_gan"], read_timeout_s=1.0) as url:
        host, port = url.removeprefix("http://").split(":")
        stalled = socket.create_connection((host, int(port)))
        stalled.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n\x89PNG")
        assert httpx.post(f"{url}/translate", content=png_bytes(photo(1)), timeout=60).status_code == 200
        stalled.settimeout(10)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):  # headers, then the JSON body
            received = stalled.recv(4096)
            if not received:
                break
            answer += received
        answer = answer.decode(errors="replace")
        stalled.close()
    assert answer.startswith("HTTP/1.1 408") and "took more than 1 s" in answer


def test_a_client_gone_before_its_answer_is_not_translated(runs):
    import socket
    body = png_bytes(photo(1))
    with served(runs["cycle_gan"], max_batch=4, batch_timeout_ms=1500) as url:  # it waits 1.5 s for a batch
        host, port = url.removeprefix("http://").split(":")
        leaving = socket.create_connection((host, int(port)))
        leaving.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        time.sleep(0.5)
        leaving.close()
        time.sleep(2.0)
        health = httpx.get(f"{url}/health").json()
    assert health["batches"] == 0 and health["served"] == 0 and health["requests_in_server"] == 0, health


def test_one_bad_upload_in_a_batch_costs_only_its_own_request(runs, tmp_path):
    floats = []
    for k in range(4):
        values = np.random.default_rng(k).random((24, 24, 3)).astype(np.float32)
        if k == 2:
            values[5, 5, 1] = np.nan  # refused when translated: float data holding NaN
        floats.append(tmp_path / f"f{k}.tif")
        write_image(str(floats[-1]), values)

    async def send_all(url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120) as client:
            return await asyncio.gather(*(client.post(f"{url}/translate", content=path.read_bytes())
                                          for path in floats))

    with served(runs["cycle_gan"], max_batch=4, batch_timeout_ms=300) as url:
        answers = asyncio.run(send_all(url))
        health = httpx.get(f"{url}/health").json()
    assert health["largest_batch"] == 4
    assert [answer.status_code for answer in answers] == [200, 200, 422, 200], [a.text for a in answers]
    assert "NaN" in answers[2].json()["error"] and str(runs["cycle_gan"]) not in answers[2].json()["error"]
    for k in (0, 1, 3):
        assert np.array_equal(decoded(answers[k], tmp_path, f"out{k}.tif"), expected(runs["cycle_gan"], floats[k]))


def test_a_path_in_the_client_file_name_only_names_the_download(runs, tmp_path):
    with served(runs["cycle_gan"]) as url:
        answer = httpx.post(f"{url}/translate", files={"file": ("../../../etc/passwd.png", png_bytes(photo(1)))},
                            timeout=60)
    assert answer.status_code == 200
    assert answer.headers["content-disposition"] == 'attachment; filename="passwd.png"'


# ------------------------------------------------------------------------------------------ options
def post(url: str, body: bytes = b"", params: object = None, texts: dict | None = None,
         files: dict | None = None) -> tuple[int, str]:
    """(status, the refusal's one line, or "" when answered) of POST /translate: `body` as the request's body, or
    as the form file 'file' beside `texts` and `files` when either is given."""
    if texts is None and files is None:
        answer = httpx.post(f"{url}/translate", params=params, content=body, timeout=60)
    else:
        parts = {**({"file": ("photo.png", body)} if body else {}), **(files or {})}
        answer = httpx.post(f"{url}/translate", params=params, data=texts or {}, files=parts, timeout=60)
    return answer.status_code, answer.json()["error"] if answer.status_code != 200 else ""


PICTURE = png_bytes(photo(1))
# What a client sends that /translate does not take, and the words its refusal must hold: a name it does not
# know (misspelt, in another case, in the form), a value nobody reads, a form file of another name, an option
# twice, and names and values of 10,000 characters, which are quoted cut.
UNTAKEN = {
    "misspelt_in_the_query": ({"directon": "BtoA"}, None, None, ("'directon'", "did you mean direction",
                                                                  "takes direction, response")),
    "another_case_in_the_query": ({"Direction": "BtoA"}, None, None, ("'Direction'", "did you mean direction")),
    "misspelt_in_the_form": ({}, {"directon": "BtoA"}, None, ("'directon' in the form",)),
    "a_form_file_of_another_name": ({}, {}, {"image": ("b.png", PICTURE)}, ("'image'", "as 'file'")),
    "the_file_as_a_query_option": ({"file": "photo.png"}, None, None, ("'file' in the query is a file",)),
    "a_response_nobody_reads": ({"response": "xml"}, None, None, ("response='xml'", "response=json")),
    "an_option_twice_in_the_query": ([("direction", "AtoB"), ("direction", "BtoA")], None, None, ("given 2 times",)),
    "an_option_in_query_and_form": ({"direction": "AtoB"}, {"direction": "BtoA"}, None, ("given 2 times",)),
    "a_10000_character_name": ({"o" * 10_000: "1"}, None, None, ("'" + "o" * 100 + "'... (cut: 10000 characters)",)),
    "a_10000_character_value": ({"direction": "B" * 10_000}, None, None, ("direction='BBB", "(cut: 10000 characters)",
                                                                            "translates AtoB or BtoA")),
}


@pytest.mark.parametrize("case", list(UNTAKEN))
def test_an_option_the_server_does_not_take_is_refused_naming_it_in_a_short_line(cycle_gan_server, case):
    query, texts, files, words = UNTAKEN[case]
    served_before = httpx.get(f"{cycle_gan_server}/health").json()["served"]
    status, reason = post(cycle_gan_server, PICTURE, query, texts, files)
    assert status == 400 and all(word in reason for word in words), (status, reason)
    assert "\n" not in reason and len(reason) <= 300, reason  # short, whatever the client sent
    assert httpx.get(f"{cycle_gan_server}/health").json()["served"] == served_before  # refused, not translated


def documented_statuses() -> list[tuple[int, str]]:
    """(status, case) of each row of docs/serving.md's table of errors; a row's case is its words up to its
    first note (in parentheses, or after a colon or semicolon)."""
    text = (ROOT / "docs" / "serving.md").read_text()
    table = text.split("| status | when |\n| --- | --- |\n", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in table.splitlines():
        status, when = (cell.strip() for cell in line.strip().strip("|").split("|"))
        rows.append((int(status), re.split(r" \(|: |; ", when, maxsplit=1)[0]))
    return rows


def stalled_client(url: str) -> socket.socket:
    """A client that sends the head of an upload of 5000 bytes and 4 of them, then nothing."""
    host, port = url.removeprefix("http://").split(":")
    client = socket.create_connection((host, int(port)))
    client.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5000\r\n\r\n\x89PNG")
    return client


def answer_on(client: socket.socket) -> tuple[int, str]:
    """(status, error) of the answer a raw client gets, closing it."""
    client.settimeout(30)
    answer = b""
    while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):  # the head, then the JSON body
        received = client.recv(4096)
        if not received:
            break
        answer += received
    client.close()
    head, _, body = answer.decode(errors="replace").partition("\r\n\r\n")
    return int(head.split()[1]), __import__("json").loads(body)["error"]


def in_server(url: str, count: int) -> None:
    """Wait until `count` requests are in the server (GET /health)."""
    deadline = time.monotonic() + 30
    while httpx.get(f"{url}/health").json()["requests_in_server"] != count:
        assert time.monotonic() < deadline, f"never {count} requests in the server"
        time.sleep(0.02)


def a_full_server(url: str) -> tuple[int, str]:
    """A request while `--queue_size` (2) stalled clients hold every place."""
    holders = [stalled_client(url), stalled_client(url)]
    in_server(url, 2)
    answer = post(url, PICTURE)
    for holder in holders:
        holder.close()
    in_server(url, 0)
    return answer


def picture_file(tmp: Path, values: np.ndarray) -> bytes:
    write_image(str(tmp / "upload.tif"), values)
    return (tmp / "upload.tif").read_bytes()


def nan_floats() -> np.ndarray:
    values = np.random.default_rng(0).random((24, 24, 3)).astype(np.float32)
    values[3, 4, 0] = np.nan
    return values


# Requests of each case docs/serving.md's table lists, sent to a CycleGAN ("cycle"), a volume model and a UNSB
# server; every one must be answered the status of its row. `tmp` is a scratch folder.
STATUS_CASES: dict[str, Callable[[dict[str, str], Path], list[tuple[int, str]]]] = {
    "no file": lambda at, tmp: [post(at["cycle"]), post(at["cycle"], files={"reference": ("a.png", PICTURE)})],
    "a damaged or truncated file": lambda at, tmp: [post(at["cycle"], PICTURE[:200])],
    "an option out of its range": lambda at, tmp: [post(at["sb"], PICTURE, {"steps": "0"}),
                                                   post(at["sb"], PICTURE, {"steps": "101"}),
                                                   post(at["sb"], PICTURE, {"seed": str(2 ** 32)})],
    "an option not the model's": lambda at, tmp: [post(at["cycle"], PICTURE, {"steps": "3"}),
                                                  post(at["cycle"], PICTURE, {"n_samples": "2"}),
                                                  post(at["sb"], PICTURE, {"direction": "BtoA"})],
    "an unknown option": lambda at, tmp: [post(at["cycle"], PICTURE, {"directon": "BtoA"}),
                                          post(at["cycle"], PICTURE, texts={"directon": "BtoA"}),
                                          post(at["cycle"], PICTURE, files={"image": ("b.png", PICTURE)})],
    "an option given twice": lambda at, tmp: [post(at["cycle"], PICTURE, {"direction": "AtoB"},
                                                   texts={"direction": "AtoB"})],
    "the upload took longer than `--read_timeout_s` to arrive": lambda at, tmp: [
        answer_on(stalled_client(at["cycle"]))],
    "more bytes than `--max_upload_mb`": lambda at, tmp: [post(at["cycle"], b"\x89PNG\r\n\x1a\n" + bytes(3 << 20))],
    "more pixels than `--max_pixels`": lambda at, tmp: [post(at["cycle"], png_header_only(1000, 1000))],
    "more channels than the model could take": lambda at, tmp: [
        post(at["cycle"], picture_file(tmp, np.zeros((16, 16, 5), np.uint8)))],
    "more values than `--max_voxels`": lambda at, tmp: [post(at["volume"], nifti_bytes((65, 64, 64)))],
    "not a format the server reads": lambda at, tmp: [post(at["cycle"], __import__("pickle").dumps({"a": 1}))],
    "a gzip file holding no NIfTI volume": lambda at, tmp: [post(at["cycle"], gzip.compress(PICTURE)),
                                                            post(at["volume"], gzip.compress(b"some notes"))],
    "a picture to a volume model": lambda at, tmp: [post(at["volume"], PICTURE)],
    "a volume to a picture model": lambda at, tmp: [
        post(at["cycle"], nifti_bytes((4, 4, 4), bytes(256))),
        post(at["cycle"], gzip.compress(nifti_bytes((4, 4, 4), bytes(256))))],
    "a file the model cannot take once decoded": lambda at, tmp: [
        post(at["cycle"], picture_file(tmp, nan_floats())),
        post(at["cycle"], picture_file(tmp, np.zeros((16, 16, 2), np.uint8)))],
    "the server failed on this request": lambda at, tmp: [post(at["cycle"], PICTURE, {"direction": "BtoA"})],
    "`--queue_size` requests are in the server already": lambda at, tmp: [a_full_server(at["cycle"])],
}


def test_every_status_docs_serving_md_lists_is_what_the_server_answers_for_its_case(runs, tmp_path):
    rows = documented_statuses()
    # each documented case has its requests here, and no case is tested that the docs do not list
    assert sorted(case for _, case in rows) == sorted(STATUS_CASES), rows
    cycle = load_model(str(runs["cycle_gan"]), ["cpu"])

    def out_of_memory(*args, **keywords):
        raise MemoryError("the device is full")
    cycle.replicas[0]["BtoA"].translate = out_of_memory  # the server's failure on one request, for the 500
    with contextlib.ExitStack() as servers:
        at = {"cycle": servers.enter_context(served(cycle, queue_size=2, read_timeout_s=0.5)),
              "volume": servers.enter_context(served(runs["volume"])),
              "sb": servers.enter_context(served(runs["sb"]))}
        for status, case in rows:
            for answered, reason in STATUS_CASES[case](at, tmp_path):
                assert answered == status, (case, answered, reason)
                assert reason and "\n" not in reason and "Traceback" not in reason and len(reason) <= 400, reason
        assert post(at["cycle"], PICTURE) == (200, "")  # and it serves on


# ------------------------------------------------------------------------------------------ photos upright
def photo_file(pixels: np.ndarray, orientation: int, kind: str = "PNG") -> bytes:
    """`pixels` stored in a file of `kind` with the EXIF orientation `orientation`, as a phone stores a photo
    taken in portrait (orientation 6: the stored pixels lie on their side, viewers turn them upright)."""
    image = Image.fromarray(pixels)
    exif = image.getexif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    image.save(buffer, format=kind, exif=exif)
    return buffer.getvalue()


def test_the_translator_reads_a_photo_of_every_exif_orientation_upright_as_viewers_show_it(runs, tmp_path):
    translator = Translator.load(runs["cycle_gan"], device="cpu")
    pixels = photo(7, 20, 28)
    for orientation in range(1, 9):
        path = tmp_path / f"turned{orientation}.png"
        path.write_bytes(photo_file(pixels, orientation))
        with Image.open(path) as stored:
            shown = np.asarray(ImageOps.exif_transpose(stored))  # what every viewer shows
            from_pil = np.asarray(translator.translate(stored))
        want = translator.translate(shown)
        assert want.shape[:2] == ((28, 20) if orientation >= 5 else (20, 28))
        assert np.array_equal(translator.translate(str(path)), want), orientation
        assert np.array_equal(from_pil, want), orientation  # a PIL image opened from the file alike


@pytest.mark.parametrize("orientation,kind", [(6, "JPEG"), (6, "PNG"), (8, "PNG"), (3, "PNG")])
def test_a_phone_photo_comes_back_upright_from_the_server_and_from_translate_py(runs, cycle_gan_server, orientation,
                                                                              kind, tmp_path, capsys):
    run = runs["cycle_gan"]
    upload = tmp_path / "in" / f"phone.{kind.lower()}"
    upload.parent.mkdir()
    upload.write_bytes(photo_file(photo(4, 36, 52), orientation, kind))
    with Image.open(upload) as stored:
        want = Translator.load(run, device="cpu").translate(np.asarray(ImageOps.exif_transpose(stored)))
    served_output = decoded(httpx.post(f"{cycle_gan_server}/translate", content=upload.read_bytes(), timeout=60),
                            tmp_path)
    assert np.array_equal(served_output, want)
    done = run_in_process("scripts/translate.py", str(upload), "--checkpoint", str(run), "--output",
                          str(tmp_path / "out"), "--device", "cpu", capsys=capsys)
    assert done.returncode == 0, done.stderr
    written = read_image(str(tmp_path / "out" / upload.name))
    assert written.shape == want.shape  # upright; a JPEG is written lossily, a PNG exactly
    assert kind == "JPEG" or np.array_equal(written, want)


# ------------------------------------------------------------------------------------------ the command
def start(*args: str) -> tuple[subprocess.Popen, str]:
    """scripts/serve.py in a process of its own; returns it and the address its first line prints."""
    server = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "serve.py"), *args, "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    line = server.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:\d+", line)
    if not found:
        server.kill()
        pytest.fail(f"the server did not start: {line} {server.stderr.read()}")
    return server, found.group(0)


def test_on_loopback_the_command_answers_only_requests_addressed_to_loopback_names(runs):
    server, url = start("--checkpoint", str(runs["pix2pix"]), "--devices", "cpu")
    try:
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        # a page of another site whose name was made to resolve to 127.0.0.1 sends its own name as Host
        assert httpx.get(f"{url}/info", headers={"host": "attacker.example"}, timeout=10).status_code == 400
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_thousand_requests_at_once_are_served_or_told_to_retry_and_none_fails(runs):
    server, url = start("--checkpoint", str(runs["cycle_gan"]), "--queue_size", "32", "--devices", "cpu,cpu")
    tiny = png_bytes(photo(6, 4, 4))

    async def flood() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=120, limits=limits) as client:
            return await asyncio.gather(*(client.post(f"{url}/translate", content=tiny) for _ in range(1000)))

    try:
        answers = asyncio.run(flood())
        statuses = [answer.status_code for answer in answers]
        assert set(statuses) <= {200, 503} and statuses.count(200) >= 32 and statuses.count(503) > 0
        assert all(answer.headers["retry-after"] == "1" for answer in answers if answer.status_code == 503)
        health = httpx.get(f"{url}/health", timeout=10).json()
        assert health["status"] == "ok" and health["requests_in_server"] == 0
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.parametrize("flags,named", [(["--max_batch", "0"], "--max_batch"), (["--port", "70000"], "--port"),
                                         (["--devices", "cpu,gpu"], "--devices: 'gpu' is not a device"),
                                         (["--checkpoint", "no/such/run"], "no/such/run")])
def test_the_serve_command_refuses_a_bad_flag_or_checkpoint_in_one_paragraph(runs, flags, named):
    args = ["--checkpoint", str(runs["cycle_gan"])] if flags[0] != "--checkpoint" else []
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "serve.py"), *args, *flags], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and named in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


# ------------------------------------------------------------------------------------------ the page
CHROMIUM = "/usr/bin/chromium"
# As the machine notes say: without the background-networking flags Chromium keeps trying hosts it cannot reach.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (Debian's, as scripts/run_tests.sh installs it) driven by Playwright, offline."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no {CHROMIUM}: install Debian's chromium package (scripts/run_tests.sh does as root)")
    with playwright_api.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


def open_page(browser, url: str, **viewport):
    page = browser.new_page(**({"viewport": viewport} if viewport else {}))
    requests_elsewhere = []
    page.on("request", lambda request: None if request.url.startswith(url) or request.url.startswith(("data:", "blob:"))
            else requests_elsewhere.append(request.url))
    page.goto(url + "/")
    page.wait_for_function("document.getElementById('about').textContent.includes('translates')")
    return page, requests_elsewhere


def page_outputs(page, count: int) -> list[np.ndarray]:
    """The outputs the page shows once `count` of them are there, newest card first, decoded from the files
    its download links hold."""
    page.wait_for_function(f"document.querySelectorAll('img.output').length >= {count}", timeout=120_000)
    blobs = page.evaluate("""async () => {
        const links = [...document.querySelectorAll('figure a[download]')];
        return Promise.all(links.map(async (a) => {
            const bytes = new Uint8Array(await (await fetch(a.href)).arrayBuffer());
            let text = ''; for (const b of bytes) text += String.fromCharCode(b);
            return [a.download, btoa(text)];
        }));
    }""")
    import base64
    return [(name, base64.b64decode(data)) for name, data in blobs]


def test_the_page_translates_dropped_images_as_the_translator_does_in_either_direction(runs, browser, tmp_path):
    run = runs["cycle_gan"]
    files = []
    for seed, name in ((1, "first.png"), (2, "second.png")):
        files.append(tmp_path / name)
        files[-1].write_bytes(png_bytes(photo(seed)))
    with served(run) as url:
        page, elsewhere = open_page(browser, url)
        page.set_input_files("#files", [str(path) for path in files])
        shown = dict(page_outputs(page, 2))
        page.select_option("#direction", "BtoA")
        page.set_input_files("#files", [str(files[0])])
        page.wait_for_function("document.querySelectorAll('img.output').length >= 3", timeout=120_000)
        backward = page_outputs(page, 3)[0]  # the newest card comes first
        page.close()
    for path in files:  # the page sends both at once: they may share a batch
        assert_translated_alike(np.asarray(Image.open(io.BytesIO(shown[path.name]))), expected(run, path))
    assert backward[0] == "first.png"
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(backward[1]))), expected(run, files[0], direction="BtoA"))
    assert not elsewhere  # offline: nothing asked of any other host


def test_the_page_shows_bicyclegan_samples_in_a_row_for_a_seed(runs, browser, tmp_path):
    run = runs["bicycle_gan"]
    upload = tmp_path / "photo.png"
    upload.write_bytes(png_bytes(photo(8, 128, 128)))
    with served(run) as url:
        page, _ = open_page(browser, url)
        page.fill("#n_samples", "3")
        page.fill("#seed", "5")
        page.set_input_files("#files", [str(upload)])
        shown = page_outputs(page, 3)
        page.close()
    assert [name for name, _ in shown] == [f"photo_sample{k}.png" for k in range(3)]
    for (_, data), want in zip(shown, expected(run, upload, n_samples=3, seed=5)):
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(data))), want)


def test_the_page_round_trips_a_volume_and_says_in_words_what_it_refused_on_a_phone_sized_screen(runs, browser,
                                                                                                   tmp_path):
    run = runs["volume"]
    upload = tmp_path / "scan.nii.gz"
    nib.save(nib.Nifti1Image((np.random.default_rng(9).random((10, 9, 11)) * 1000).astype(np.float32), np.eye(4)),
             str(upload))
    not_a_scan = tmp_path / "notes.nii.gz"
    not_a_scan.write_bytes(b"just some text, not a volume")
    with served(run) as url:
        page, _ = open_page(browser, url, width=390, height=844)
        page.set_input_files("#files", [str(upload)])
        ((name, data),) = page_outputs(page, 1)
        page.set_input_files("#files", [str(not_a_scan)])
        page.wait_for_selector(".card.failed .status")
        refusal = page.inner_text(".card.failed .status")
        fits = page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        page.close()
    (tmp_path / "served.nii.gz").write_bytes(data)
    assert name == "scan.nii.gz"
    assert np.array_equal(np.asarray(nib.load(str(tmp_path / "served.nii.gz")).dataobj), expected(run, upload)[0])
    assert refusal.startswith("refused (415)") and "not a file this server reads" in refusal
    assert fits  # nothing wider than a phone's screen
