"""The HTML report opened in headless Chromium: the DOM holds the DAG and the
Gantt chart, and the screenshot is not blank.

Chromium is Debian's ``chromium`` package (``.ci/run`` installs it); the test skips only
when no ``chromium`` is on the PATH. The screenshot is read with a small PNG decoder
(zlib and the five PNG row filters, RFC 2083 section 6), so no imaging library is needed.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import lxml.html
import pytest

from plandag.trace.html import STATUS_COLORS, write_html
from plandag.trace.reader import load_trace

CHROMIUM = shutil.which("chromium")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"
)


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless chromium with its profile, config and cache under ``profile``."""
    assert CHROMIUM is not None
    home = profile / "home"
    home.mkdir(parents=True, exist_ok=True)
    environment = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile / 'data'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=environment,
    )


def decode_png(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """``(width, height, channels, rows)`` of an 8-bit, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position, chunks, header = 8, [], None
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind = data[position + 4 : position + 8]
        body = data[position + 8 : position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
        elif kind == b"IEND":
            break
    assert header is not None
    width, height, depth, color_type, _, _, interlace = header
    assert (depth, interlace) == (8, 0), header
    assert color_type in (2, 6), "chromium writes RGB or RGBA"
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[color_type]
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels
    previous = bytearray(stride)
    rows = []
    for y in range(height):
        offset = y * (stride + 1)
        kind, line = raw[offset], bytearray(raw[offset + 1 : offset + 1 + stride])
        if kind == 1:  # Sub
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 255
        elif kind == 2:  # Up
            line = bytearray(map(lambda a, b: (a + b) & 255, line, previous))
        elif kind == 3:  # Average
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + previous[i]) >> 1)) & 255
        elif kind == 4:  # Paeth
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b = previous[i]
                c = previous[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        previous = line
    return width, height, channels, rows


def rgb(hex_color: str) -> tuple[int, int, int]:
    value = int(hex_color.lstrip("#"), 16)
    return (value >> 16) & 255, (value >> 8) & 255, value & 255


def test_the_report_in_headless_chromium(sample_path: Path, tmp_path: Path) -> None:
    page = write_html(load_trace(sample_path), tmp_path / "report.html")
    url = page.resolve().as_uri()

    dumped = chromium(tmp_path / "profile-dom", "--dump-dom", url)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    document = lxml.html.fromstring(dumped.stdout)
    [dag] = document.xpath('//svg[@id="dag"]')
    node = 'contains(concat(" ", @class, " "), " node ")'
    assert len(dag.xpath(f".//g[{node}]")) == 4
    assert len(dag.xpath('.//path[contains(@class, "edge")]')) == 4
    [gantt] = document.xpath('//svg[@id="gantt"]')
    bar = 'contains(concat(" ", @class, " "), " bar ")'
    assert len(gantt.xpath(f".//rect[{bar}]")) == 4

    screenshot = tmp_path / "report.png"
    shot = chromium(
        tmp_path / "profile-shot", f"--screenshot={screenshot}", "--window-size=1200,900", url
    )
    assert shot.returncode == 0, shot.stderr[-2000:]
    width, height, channels, rows = decode_png(screenshot.read_bytes())
    assert (width, height) == (1200, 900)
    pixels = set()
    not_white = 0
    for row in rows:
        for x in range(0, len(row), channels):
            pixel = tuple(row[x : x + 3])
            pixels.add(pixel)
            if pixel != (255, 255, 255):
                not_white += 1
    assert not_white > width * height // 20  # well over 5 % of the page is drawn
    assert len(pixels) > 50
    # the nodes' and bars' fills: succeeded steps in green, the failed one in red
    assert rgb(STATUS_COLORS["succeeded"]) in pixels
    assert rgb(STATUS_COLORS["failed"]) in pixels
