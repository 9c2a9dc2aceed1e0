"""Reading image files into RGB arrays: EXIF orientation, every common pixel mode, huge images decoded small.

A photo's pixels are stored as the camera held them and its EXIF ``Orientation`` says how to turn them; the
image a person sees (and the size boxes refer to) is the turned one. Pixel modes: grayscale, palette, RGBA/LA
(composited over white: transparent pixels carry no colour), CMYK, and 16-bit grayscale PNG (``I;16``/``I``,
scaled from 0-65535 to 0-255 rather than clipped) all become 8-bit RGB.

Memory: an image whose longer side exceeds ``max_side`` is reduced to it. A JPEG is decoded directly at a reduced
scale (libjpeg's DCT scaling: 1/2, 1/4 or 1/8), so even a gigapixel JPEG needs little memory; any other format
must be decoded whole, so one of more than ``max_pixels`` pixels is refused (named as a failed image). Pillow's
decompression-bomb guard stays on: an image of more than twice ``PIL.Image.MAX_IMAGE_PIXELS`` (about 179 million
pixels) is refused when opened, whatever its format (raise that limit in your own code to read bigger JPEGs).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from vlattn.errors import DataError

SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")
DEFAULT_MAX_SIDE = 1600  # larger than any extractor's input (Faster R-CNN's default max_size is 1333)
DEFAULT_MAX_PIXELS = 64_000_000  # a whole decode of at most this many pixels (RGBA 16-bit: 512 MB)
_TRANSPOSED = {5, 6, 7, 8}  # EXIF orientations that swap width and height
_ORIENTATION_TAG = 0x0112
_DIGITS = re.compile(r"(\d+)")


class ImageFailure(Exception):
    """An image file that cannot be read; ``reason`` is one line."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


@dataclass(frozen=True)
class LoadedImage:
    """``pixels`` (H, W, 3) uint8 RGB, upright; ``width``/``height`` of the upright original image (boxes are in
    its pixels); ``pixels`` may be smaller (``scale`` = pixels' width / ``width``)."""

    pixels: np.ndarray
    width: int
    height: int

    @property
    def scale(self) -> float:
        """Pixels of ``pixels`` per pixel of the original image."""
        return self.pixels.shape[1] / self.width


def image_id_of(path: Path) -> int:
    """The image id in a file name: its last run of digits (``COCO_val2014_000000391895.jpg`` -> 391895)."""
    runs = _DIGITS.findall(path.stem)
    if not runs:
        raise DataError("no image id in the file name (vlattn takes the last run of digits, e.g. img_42.jpg -> 42)",
                        path=path)
    return int(runs[-1])


def list_images(sources: Iterable[str | Path]) -> list[tuple[int, Path]]:
    """``(image id, file)`` for every image file given or found (not recursively) in a given directory, sorted by
    id; a missing source, a directory without images and an id held by two files are one-line errors."""
    found: dict[int, Path] = {}
    for source in map(Path, sources):
        if source.is_dir():
            files = sorted(p for p in source.iterdir() if p.suffix.lower() in SUFFIXES and p.is_file())
            if not files:
                raise DataError(f"no image files ({', '.join(SUFFIXES)}) in the directory", path=source)
        elif source.is_file():
            files = [source]
        else:
            raise DataError("image file or directory not found", path=source)
        for file in files:
            image_id = image_id_of(file)
            if image_id in found and found[image_id] != file:
                raise DataError(f"image id {image_id} is in two files: {found[image_id]} and {file}", path=file)
            found[image_id] = file
    return sorted(found.items())


def _to_rgb(image: Image.Image) -> Image.Image:
    """Any Pillow mode as 8-bit RGB (see the module docstring)."""
    if image.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        values = np.asarray(image, dtype=np.float64)
        peak = 65535.0 if image.mode.startswith("I;16") or values.max(initial=0) > 255 else 255.0
        grey = np.clip(np.rint(values * (255.0 / peak)), 0, 255).astype(np.uint8)
        return Image.fromarray(grey, "L").convert("RGB")
    if image.mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB") if image.mode != "RGB" else image


def _reduced(size: tuple[int, int], max_side: int) -> tuple[int, int]:
    """``size`` shrunk (aspect kept) so that its longer side is at most ``max_side``."""
    width, height = size
    factor = min(1.0, max_side / max(width, height))
    return max(1, round(width * factor)), max(1, round(height * factor))


def load_image(path: str | Path, *, max_side: int = DEFAULT_MAX_SIDE,
               max_pixels: int = DEFAULT_MAX_PIXELS) -> LoadedImage:
    """The upright RGB image in ``path``, its longer side at most ``max_side``; raises :class:`ImageFailure`
    (never anything else for a bad file)."""
    path = Path(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the size is checked below
            with Image.open(path) as image:
                return _decode(image, max_side, max_pixels)
    except ImageFailure as failure:
        raise ImageFailure(path, failure.reason) from None
    except Image.DecompressionBombError as err:
        raise ImageFailure(path, f"refused by Pillow's decompression-bomb guard: {err}") from None
    except UnidentifiedImageError:
        raise ImageFailure(path, "not an image Pillow can read") from None
    except Exception as err:  # Pillow's decoders raise many types (OSError, SyntaxError, struct.error, ...)
        raise ImageFailure(path, f"cannot decode: {' '.join(str(err).split()) or type(err).__name__}") from None


def _decode(image: Image.Image, max_side: int, max_pixels: int) -> LoadedImage:
    orientation = image.getexif().get(_ORIENTATION_TAG, 1)
    stored_w, stored_h = image.size
    width, height = (stored_h, stored_w) if orientation in _TRANSPOSED else (stored_w, stored_h)
    target = _reduced(image.size, max_side)
    if image.format == "JPEG" and target != image.size:
        image.draft("RGB", target)  # decode at the smallest DCT scale still at least `target`
    decoded_pixels = image.size[0] * image.size[1]
    if decoded_pixels > max_pixels:
        raise ImageFailure(Path(image.filename or "?"), f"{stored_w} x {stored_h} pixels: more than the "
                           f"{max_pixels} a {image.format or 'non-JPEG'} image may have (it is decoded whole)")
    image.load()
    image = ImageOps.exif_transpose(image) if orientation != 1 else image
    image = _to_rgb(image)
    final = _reduced((width, height), max_side)
    if image.size != final:
        image = image.resize(final, Image.Resampling.BILINEAR, reducing_gap=2.0)
    return LoadedImage(np.asarray(image).copy(), width, height)
