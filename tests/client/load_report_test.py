#!/usr/bin/env python3
"""`blockread load --report=FILE.html` in a real browser.

Starts a real blockread-server on 127.0.0.1 (the demo device), runs `blockread load --report`,
renders the page with headless Chromium (Debian's `chromium`) to a PNG and to its DOM, and checks
that the picture is not blank (it has the charts' colours, and enough of them) and that the DOM
has every chart with its marks and labels. Standard library only: the PNG is decoded with zlib.

    load_report_test.py SERVER_BINARY CLI_BINARY
    BLOCKREAD_REPORT_KEEP=DIR  keep report.html and report.png there (to look at them)
Exits 77 (skipped) when chromium is not installed.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

WIDTH, HEIGHT = 900, 2000


def read_png(path):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB or RGBA PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    width, height = int.from_bytes(header[0:4], "big"), int.from_bytes(header[4:8], "big")
    depth, color, interlace = header[8], header[9], header[12]
    assert depth == 8 and color in (2, 6) and interlace == 0, f"unexpected PNG format {header!r}"
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous, offset = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[offset], bytearray(raw[offset + 1:offset + 1 + stride])
        offset += 1 + stride
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            up_left = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else up_left
                line[i] = (line[i] + pred) & 0xFF
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, channels)])
        previous = line
    return width, height, rows


def start_server(binary, work):
    out = open(os.path.join(work, "server.out"), "w")
    log = open(os.path.join(work, "server.log"), "w")
    server = subprocess.Popen([binary, "--listen=127.0.0.1:0", "--metrics-listen=",
                               f"--data-dir={work}/data"], stdout=out, stderr=log)
    for _ in range(600):
        text = open(os.path.join(work, "server.out")).read()
        match = re.search(r"listening on (\S+)", text)
        if match:
            return server, match.group(1)
        if server.poll() is not None:
            break
        time.sleep(0.1)
    server.kill()
    sys.exit("server did not start:\n" + open(os.path.join(work, "server.log")).read())


def main():
    server_binary, cli = sys.argv[1:3]
    chromium = shutil.which("chromium")
    if chromium is None:
        print("skipped: chromium is not installed (deploy/install-deps.sh installs it)")
        return 77
    work = tempfile.mkdtemp(prefix="blockread-report-")
    server = None
    try:
        server, target = start_server(server_binary, work)
        report = os.path.join(work, "report.html")
        # Reads in the sparse file's holes fall back to the generic path: every chart has marks.
        load = subprocess.run([cli, "load", f"--target={target}", "--file=sparse,fragmented",
                               "--mode=stream", "--qd=16", "--runtime=3", f"--report={report}",
                               "--output=json"], capture_output=True, text=True, timeout=120)
        assert load.returncode == 0, load.stderr
        result = json.loads(load.stdout)
        assert len(result["per_second"]) >= 2, result["per_second"]
        assert set(result["settings"]) == {"threads", "channels", "streams", "batch"}

        png = os.path.join(work, "report.png")
        browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                   f"--user-data-dir={work}/chromium", f"--window-size={WIDTH},{HEIGHT}"]
        subprocess.run(browser + [f"--screenshot={png}", f"file://{report}"], check=True,
                       capture_output=True, timeout=180)
        dom = subprocess.run(browser + ["--dump-dom", f"file://{report}"], check=True,
                             capture_output=True, text=True, timeout=180).stdout
        keep = os.environ.get("BLOCKREAD_REPORT_KEEP")
        if keep:
            os.makedirs(keep, exist_ok=True)
            shutil.copy(report, keep)
            shutil.copy(png, keep)

        # The DOM: every chart, with its marks, and the labels a reader looks for.
        charts = dict(re.findall(r'<svg id="([a-z-]+-chart)"(.*?)</svg>', dom, re.S))
        expected = {"iops-chart": "<polyline", "latency-chart": "<polyline",
                    "histogram-chart": "<rect", "split-chart": "<rect", "paths-chart": "<rect",
                    "fallbacks-chart": "<rect"}
        for chart, mark in expected.items():
            assert chart in charts, f"{chart} missing from the DOM"
            assert mark in charts[chart], f"{chart} has no {mark}"
        assert charts["latency-chart"].count("<polyline") == 2, "p50 and p99 lines"
        for label in ("blockread load report", "IOPS per second", "Latency per second",
                      "Latency histogram", "p50", "p99", "client + network", "server queue",
                      "server device", "Server paths", "simple", "generic", "Fallback reasons",
                      "not_mapped",
                      "seconds into the measured run", "server version", "settings",
                      f"--report={report}", f"channels={result['settings']['channels']}"):
            assert label in dom, f"label {label!r} missing from the DOM"
        for banned in ("<script", "<link", "src=", "href="):
            assert banned not in dom, f"{banned} in the page: it must load nothing"

        # The picture: the size asked for, mostly white page, and the charts' colours in it.
        width, height, rows = read_png(png)
        assert (width, height) == (WIDTH, HEIGHT), (width, height)
        colours, counts = set(), {}
        for row in rows[::2]:
            for pixel in row[::2]:
                colours.add(pixel)
                counts[pixel] = counts.get(pixel, 0) + 1
        sampled = sum(counts.values())
        white = counts.get((255, 255, 255), 0)
        assert white < 0.97 * sampled, f"nearly blank: {white} of {sampled} pixels white"
        assert len(colours) >= 50, f"only {len(colours)} colours"
        for name, rgb in (("blue", (0x1F, 0x77, 0xB4)), ("orange", (0xFF, 0x7F, 0x0E)),
                          ("green", (0x2C, 0xA0, 0x2C))):
            assert counts.get(rgb, 0) >= 50, f"too little {name} {rgb}: {counts.get(rgb, 0)}"
        print(f"ok: {len(charts)} charts in the DOM; PNG {width}x{height}, {len(colours)} colours, "
              f"{100 * (1 - white / sampled):.1f}% not white")
        return 0
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
