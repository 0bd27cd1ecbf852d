"""Bounds of one import (issue 13, "Bounded uploads"), checked before anything is inflated or decoded.

Every bound is an :class:`ImportLimits` field with an environment override (``MASKLAB_...``); the
defaults and why:

============================  ==========================  =============================================
field (environment variable)  default                     why
============================  ==========================  =============================================
``max_members``               200,000 entries             read from the zip's end record before its
(MASKLAB_MAX_MEMBERS)                                     directory is parsed; past it the whole archive
                                                          is refused (split it)
``max_member_bytes``          256 MiB uncompressed        one member is read into memory; 256 MiB holds
(MASKLAB_MAX_MEMBER_BYTES)                                a 40 Mpx 16-bit RGB TIFF stored uncompressed
``max_compression_ratio``     200 (uncompressed :         Deflate tops out near 1032:1 (what bombs use);
(MASKLAB_MAX_COMPRESSION_     compressed, from the zip    images compress 1-30:1, flat drawings saved as
RATIO)                        directory)                  BMP up to ~110:1 (Tux Paint stamps, measured)
``ratio_min_bytes``           1 MiB                       members smaller than this are not checked for
(MASKLAB_RATIO_MIN_BYTES)                                 ratio: they cannot inflate to much
``max_image_pixels``          40,000,000 px               from the image header, before decoding: a
(MASKLAB_MAX_IMAGE_PIXELS)                                40 Mpx camera photo fits; at most Pillow's own
                                                          hard limit (2 x ``Image.MAX_IMAGE_PIXELS``)
``max_decoded_bytes``         4 GiB for the whole import  every byte the import inflates or decodes:
(MASKLAB_MAX_DECODED_BYTES)                               each member's uncompressed size, its full-size
                                                          pixels and its resized copy; 200 MB of JPEGs
                                                          (Streamlit's upload cap) decode to about 2 GB;
                                                          audio: 4 bytes a sample and channel decoded
``max_clip_seconds``          600 s (10 minutes)          one audio clip, from its header (frames /
(MASKLAB_MAX_CLIP_SECONDS)                                rate) before decoding: masked-modeling clips
                                                          are seconds long; a 10-minute recording is
                                                          already 38 MB of float32 at 16 kHz
============================  ==========================  =============================================

A member over a limit is refused with a reason that names the limit and its variable; the other
members are imported.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.errors import DatasetError
from engine.messages import field_problems

PILLOW_HARD_LIMIT = 2 * (Image.MAX_IMAGE_PIXELS or 89_478_485)
"""Pixels above which Pillow itself refuses to open an image (``DecompressionBombError``)."""


class ImportLimits(BaseModel):
    """Bounds of one import; see the module docstring for the defaults and their reasons.

    Attributes:
        max_members: entries in one archive (folder: files).
        max_member_bytes: uncompressed bytes of one member.
        max_compression_ratio: uncompressed / compressed size of one zip member.
        ratio_min_bytes: members with fewer uncompressed bytes skip the ratio check.
        max_image_pixels: width x height of one image, from its header.
        max_decoded_bytes: bytes inflated or decoded by the whole import.
        max_clip_seconds: duration of one audio clip, from its header.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_members: int = Field(200_000, ge=1)
    max_member_bytes: int = Field(256 * 2**20, ge=1)
    max_compression_ratio: float = Field(200.0, gt=1.0)
    ratio_min_bytes: int = Field(2**20, ge=0)
    max_image_pixels: int = Field(40_000_000, ge=1, le=PILLOW_HARD_LIMIT)
    max_decoded_bytes: int = Field(4 * 2**30, ge=1)
    max_clip_seconds: float = Field(600.0, gt=0.0)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ImportLimits:
        """Defaults overridden by the ``MASKLAB_*`` variables of :data:`ENV_VARS` that are set.

        Raises DatasetError naming the variable when its value is not a number in range.
        """
        environ = os.environ if environ is None else environ
        values: dict[str, float | int] = {}
        for field, var in ENV_VARS.items():
            raw = environ.get(var, "").strip()
            if not raw:
                continue
            try:
                values[field] = float(raw) if field in ("max_compression_ratio", "max_clip_seconds") else int(raw)
            except ValueError:
                raise DatasetError(f"{var}={raw!r} is not a number; unset it or give e.g. {getattr(cls(), field)}")
        try:
            return cls(**values)
        except ValidationError as e:
            loc, text, _ = field_problems(e)[0]
            var = ENV_VARS[loc]
            raise DatasetError(f"{var}={environ.get(var)!r}: {text.split(' (got ')[0]}") from None


ENV_VARS = {
    "max_members": "MASKLAB_MAX_MEMBERS",
    "max_member_bytes": "MASKLAB_MAX_MEMBER_BYTES",
    "max_compression_ratio": "MASKLAB_MAX_COMPRESSION_RATIO",
    "ratio_min_bytes": "MASKLAB_RATIO_MIN_BYTES",
    "max_image_pixels": "MASKLAB_MAX_IMAGE_PIXELS",
    "max_decoded_bytes": "MASKLAB_MAX_DECODED_BYTES",
    "max_clip_seconds": "MASKLAB_MAX_CLIP_SECONDS",
}
"""The environment variable of each :class:`ImportLimits` field."""


def human_bytes(n: float) -> str:
    """``n`` bytes as ``"512 B"``, ``"3.0 MiB"``, ``"4.0 GiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def budget_reason(need: int, left: int, limits: ImportLimits) -> str:
    """The refusal of a member that needs ``need`` more bytes when ``left`` remain of the import's budget."""
    return (f"needs {human_bytes(need)} and the import has {human_bytes(max(left, 0))} left of its "
            f"{human_bytes(limits.max_decoded_bytes)} (MASKLAB_MAX_DECODED_BYTES): import the rest in "
            "another archive or raise the limit")  # fmt: skip
