"""Reading image files: EXIF orientation, pixel modes, huge images, unreadable files; ids from file names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vlattn.errors import DataError
from vlattn.pixels.images import ImageFailure, image_id_of, list_images, load_image


def test_exif_orientation_turns_the_pixels_and_the_size(tmp_path: Path) -> None:
    stored = np.zeros((20, 40, 3), np.uint8)  # 40 wide, 20 high; left half white
    stored[:, :20] = 255
    exif = Image.Exif()
    exif[0x0112] = 6  # the camera was turned: rotate 90 degrees clockwise to view
    Image.fromarray(stored).save(tmp_path / "a_1.jpg", exif=exif, quality=100)
    loaded = load_image(tmp_path / "a_1.jpg")
    assert (loaded.width, loaded.height) == (20, 40) and loaded.pixels.shape == (40, 20, 3)
    # clockwise: the stored left half becomes the top half
    assert loaded.pixels[:15].mean() > 240 and loaded.pixels[25:].mean() < 15


@pytest.mark.parametrize("mode, value, expected", [
    ("L", 200, (200, 200, 200)),
    ("CMYK", (0, 255, 255, 0), (255, 0, 0)),
    ("RGBA", (10, 20, 30, 0), (255, 255, 255)),  # fully transparent: the white it is composited on
    ("RGBA", (10, 20, 30, 255), (10, 20, 30)),
    ("LA", (100, 255), (100, 100, 100)),
])
def test_pixel_modes_become_rgb(tmp_path: Path, mode: str, value, expected) -> None:
    suffix = ".jpg" if mode == "CMYK" else ".png"
    Image.new(mode, (6, 4), value).save(tmp_path / f"m_2{suffix}", quality=100)
    loaded = load_image(tmp_path / f"m_2{suffix}")
    assert loaded.pixels.dtype == np.uint8 and loaded.pixels.shape == (4, 6, 3)
    np.testing.assert_allclose(loaded.pixels.reshape(-1, 3).mean(0), expected, atol=2)


def test_sixteen_bit_png_is_scaled_not_clipped(tmp_path: Path) -> None:
    values = np.array([[0, 257 * 128, 65535]], np.uint16)
    Image.fromarray(values).save(tmp_path / "deep_3.png")
    assert Image.open(tmp_path / "deep_3.png").mode.startswith("I")
    assert load_image(tmp_path / "deep_3.png").pixels[0, :, 0].tolist() == [0, 128, 255]


def test_palette_with_transparency(tmp_path: Path) -> None:
    image = Image.new("P", (2, 1))
    image.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    image.putdata([0, 1])
    image.save(tmp_path / "p_4.png", transparency=1)
    assert load_image(tmp_path / "p_4.png").pixels[0].tolist() == [[255, 0, 0], [255, 255, 255]]


def test_a_large_jpeg_is_decoded_small_and_keeps_its_size(tmp_path: Path) -> None:
    Image.new("RGB", (4000, 3000), (0, 128, 255)).save(tmp_path / "big_5.jpg")
    loaded = load_image(tmp_path / "big_5.jpg", max_side=500)
    assert (loaded.width, loaded.height) == (4000, 3000) and loaded.pixels.shape == (375, 500, 3)
    assert loaded.scale == pytest.approx(0.125)


def test_an_image_too_big_to_decode_whole_is_a_named_failure(tmp_path: Path) -> None:
    Image.new("L", (300, 200)).save(tmp_path / "wide_6.png")
    with pytest.raises(ImageFailure, match="300 x 200 pixels: more than the 50000") as failure:
        load_image(tmp_path / "wide_6.png", max_pixels=50_000)
    assert failure.value.path == tmp_path / "wide_6.png"
    assert load_image(tmp_path / "wide_6.png", max_side=30).pixels.shape == (20, 30, 3)  # allowed: within the cap


def test_pillows_decompression_bomb_guard_is_a_named_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    Image.new("L", (100, 100)).save(tmp_path / "bomb_7.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 4000)  # 10,000 pixels > twice the limit
    with pytest.raises(ImageFailure, match="decompression-bomb guard"):
        load_image(tmp_path / "bomb_7.png")


@pytest.mark.parametrize("content", [b"", b"not an image at all", b"\x89PNG\r\n\x1a\n" + b"\x00" * 40])
def test_unreadable_files_are_failures(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "bad_8.png").write_bytes(content)
    with pytest.raises(ImageFailure):
        load_image(tmp_path / "bad_8.png")


def test_truncated_jpeg_is_a_failure(tmp_path: Path) -> None:
    Image.new("RGB", (64, 64), (1, 2, 3)).save(tmp_path / "t_9.jpg")
    data = (tmp_path / "t_9.jpg").read_bytes()
    (tmp_path / "t_9.jpg").write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageFailure, match="cannot decode"):
        load_image(tmp_path / "t_9.jpg")


def test_ids_from_file_names(tmp_path: Path) -> None:
    assert image_id_of(Path("COCO_val2014_000000391895.jpg")) == 391895
    assert image_id_of(Path("IMG_20240101_0042.JPG")) == 42
    with pytest.raises(DataError, match="no image id in the file name"):
        image_id_of(Path("beach.jpg"))
    for name in ("x_1.png", "x_001.jpg"):
        Image.new("L", (2, 2)).save(tmp_path / name)
    with pytest.raises(DataError, match="image id 1 is in two files"):
        list_images([tmp_path])
    (tmp_path / "x_001.jpg").unlink()
    (tmp_path / "notes.txt").write_text("ignored")
    assert list_images([tmp_path, tmp_path / "x_1.png"]) == [(1, tmp_path / "x_1.png")]
    with pytest.raises(DataError, match="not found"):
        list_images([tmp_path / "missing"])
