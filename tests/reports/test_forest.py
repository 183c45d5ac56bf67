"""The leaderboard's forest plot: a PNG per benchmark next to the Markdown, linked from it, embedded in the
HTML, drawn from the table's numbers, with degraded cells marked; and the HTML in headless Chromium."""

from __future__ import annotations

import base64
import shutil
import subprocess

import pytest
from test_leaderboard import make_run

from sourcebench.reports.figures import DEGRADED_COLOR, forest_png
from sourcebench.reports.leaderboard import write_report


def _bench(degraded: bool) -> dict:
    base = {"method": "hybrid_rag", "is_baseline": True, "status": "ok", "accuracy": 0.6, "ci_lo": 0.5,
            "ci_hi": 0.7, "degraded": []}
    other = {"method": "awm", "is_baseline": False, "status": "ok", "accuracy": 0.7, "ci_lo": 0.62, "ci_hi": 0.78,
             "delta_pp": 10.0, "p_holm": 0.01, "degraded": ["awm on s (seed 0): degraded"] if degraded else []}
    return {"benchmark": "b", "baseline": "hybrid_rag",
            "methods": [base, other, {"method": "rika", "is_baseline": False, "status": "not run", "degraded": []}]}


def _red_pixels(png: bytes) -> int:
    import io

    import numpy as np
    from PIL import Image

    red = np.array([int(DEGRADED_COLOR[i:i + 2], 16) for i in (1, 3, 5)])
    with Image.open(io.BytesIO(png)) as img:
        px = np.asarray(img.convert("RGB"), dtype=int)
    return int((np.abs(px - red) < 40).all(axis=-1).sum())


def test_forest_png_marks_degraded_cells():
    healthy, degraded = forest_png(_bench(False)), forest_png(_bench(True))
    assert healthy.startswith(b"\x89PNG") and degraded.startswith(b"\x89PNG")
    assert _red_pixels(healthy) == 0 < _red_pixels(degraded)  # the degraded cell is drawn (and named) in red


def test_forest_plot_is_written_linked_and_embedded(tmp_path):
    paths = write_report(make_run(tmp_path), n_boot=100)
    md, html = paths["md"].read_text(), paths["html"].read_text()
    for bench in ("phantomwiki", "apibench"):
        png = paths[f"forest_{bench}.png"]
        assert png.parent == paths["md"].parent and png.read_bytes().startswith(b"\x89PNG")
        assert f"![{bench}: accuracy and difference from the baseline](forest_{bench}.png)" in md
        assert base64.b64encode(png.read_bytes()).decode() in html
    # the figure sits in its benchmark's section, right after the leaderboard table; cost and the rest follow
    pw = md.split("## phantomwiki", 1)[1].split("## ", 1)[0]
    assert pw.index("phantomwiki: leaderboard") < pw.index("forest_phantomwiki.png")
    assert "**phantomwiki: cost**" not in pw and md.index("forest_phantomwiki.png") < md.index("**phantomwiki: cost**")
    assert "DEGRADED cells" in pw and "interval (the paired test inverted) and the Holm-adjusted p" in pw
    # no_source's phantomwiki cell is degraded (tests/reports/test_leaderboard.py): red in its plot only
    assert _red_pixels(paths["forest_phantomwiki.png"].read_bytes()) > 0
    assert _red_pixels(paths["forest_apibench.png"].read_bytes()) == 0


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


@pytest.mark.slow
def test_leaderboard_html_shows_the_forest_plot_in_headless_chromium(tmp_path):
    """The browser decodes the embedded PNGs: their natural sizes are the PNG files' sizes."""
    exe = _chromium()
    if exe is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    from PIL import Image

    paths = write_report(make_run(tmp_path), n_boot=100)
    page = paths["html"].resolve()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]
    # after load, write each image's decoded size into the page title, which --dump-dom returns
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace(
        "</body>", "<script>window.onload=()=>{document.title=[...document.images].map(i=>i.alt+'='+"
                   "i.naturalWidth+'x'+i.naturalHeight).join(';')}</script></body>"))
    dom = subprocess.run([exe, *flags, "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()], check=False,
                         capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    title = dom.stdout.split("<title>", 1)[1].split("</title>", 1)[0]
    shown = dict(x.rsplit("=", 1) for x in title.split(";"))
    for bench in ("phantomwiki", "apibench"):
        with Image.open(paths[f"forest_{bench}.png"]) as img:
            assert shown[f"{bench}: accuracy and difference from the baseline"] == f"{img.width}x{img.height}"
    shot = tmp_path / "page.png"
    r = subprocess.run([exe, *flags, f"--screenshot={shot}", "--window-size=1400,2000", page.as_uri()],
                       check=False, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    with Image.open(shot) as img:
        colors = img.convert("RGB").resize((70, 100)).getcolors(maxcolors=100000)
        assert colors is not None and len(colors) > 20  # rendered content, not a blank page
