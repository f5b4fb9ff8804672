"""A built wheel carries everything the server needs: the package, the sample and web pages."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from streamcap.server import routes

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_carries_package_sample_and_web_pages(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(ROOT)],
        check=True,
        timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("streamcap-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "streamcap/decoding/screen.py" in names and "streamcap/server/app.py" in names
    assert any(n.startswith("streamcap/samples/") and n.endswith(".wav") for n in names)
    pages = {Path(n).name for n in names if "/data/share/streamcap/web/" in n}
    assert pages == {p.name for p in (ROOT / "web").iterdir() if p.suffix in (".html", ".js")}


def test_web_dir_is_found_in_a_checkout_or_an_installed_environment(
    tmp_path: Path, monkeypatch
) -> None:
    assert routes.default_web_dir() == ROOT / "web"
    installed = tmp_path / "share" / "streamcap" / "web"
    installed.mkdir(parents=True)
    (installed / "index.html").write_text("<html></html>")
    monkeypatch.setattr(routes, "web_dir_candidates", lambda: [tmp_path / "missing", installed])
    assert routes.default_web_dir() == installed
