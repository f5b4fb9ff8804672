"""The package's shape: a light public API, and the layer contracts (`[tool.importlinter]`).

Subprocesses, so what this test process has imported already (torch, for other tests) cannot
hide an eager import.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import streamcap

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_import_streamcap_is_light() -> None:
    """No torch, transformers or sound library at `import streamcap`: the CLI's start-up and
    the pure layers must not pay for a model they may never load."""
    heavy = ("torch", "transformers", "sounddevice", "soxr", "av", "websockets")
    code = (
        "import sys, streamcap; "
        f"loaded = [m for m in {heavy!r} if m in sys.modules]; "
        "assert not loaded, loaded; "
        "assert streamcap.__version__"
    )
    run = _python(code)
    assert run.returncode == 0, run.stderr


def test_core_and_decoding_options_stay_light() -> None:
    code = (
        "import sys; import streamcap.core.policy, streamcap.core.segmenter, "
        "streamcap.core.text, streamcap.core.captions, streamcap.core.decode_types, "
        "streamcap.decoding.spec; "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    run = _python(code)
    assert run.returncode == 0, run.stderr


def test_every_public_name_resolves() -> None:
    for name in streamcap.__all__:
        assert getattr(streamcap, name) is not None, name
    assert {"Engine", "LiveStream", "LiveConfig", "CaptionServer", "ServerConfig"} <= set(
        streamcap.__all__
    )
    assert streamcap.Engine.__module__ == "streamcap.runtime.engine"
    assert set(streamcap.__all__) <= set(dir(streamcap))
    try:
        streamcap.NoSuchName  # noqa: B018 - the attribute lookup is the test
    except AttributeError:
        pass
    else:
        raise AssertionError("unknown names must raise AttributeError")


def test_import_contracts_hold() -> None:
    """`lint-imports` (import-linter) checks the layer contracts in pyproject.toml."""
    run = subprocess.run(
        [str(BIN / "lint-imports"), "--no-cache"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "broken" in run.stdout and "0 broken" in run.stdout


def test_everything_but_the_ray_backend_works_without_ray() -> None:
    """Ray is optional: with it made unimportable, the server, the CLI and the gateway side of
    the cluster layer import, `serve --help` lists the backend, and `--backend ray` says in one
    line what to install."""
    block = "import sys; sys.modules['ray'] = None; "
    run = _python(
        block + "import streamcap.server.app, streamcap.cli.serve, streamcap.cli.replicas, "
        "streamcap.cluster.remote, streamcap.cluster.transport, streamcap.cluster.wire"
    )
    assert run.returncode == 0, run.stderr
    cli = block + "from streamcap.cli import main; sys.exit(main(sys.argv[1:]))"

    def streamcap(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", cli, *args], capture_output=True,
                              text=True, timeout=120, cwd=ROOT)  # fmt: skip

    run = streamcap("serve", "--help")
    assert run.returncode == 0 and "--backend {local,ray}" in run.stdout, run.stderr
    run = streamcap("serve", "--port", "0", "--backend", "ray", "--replicas", "1")
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 1 and len(lines) == 1, run.stderr
    assert "needs Ray Serve" in lines[0] and "pip install 'streamcap[ray]'" in lines[0]


#: The longest a module may be (CONTRIBUTING: one idea per module, ~400 lines).
MAX_LINES = 450


def test_no_file_is_over_the_line_limit() -> None:
    over = {
        str(p.relative_to(ROOT)): n
        for folder in ("streamcap", "tests", "scripts")
        for p in (ROOT / folder).rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not over, f"over {MAX_LINES} lines: {over}"


def test_no_import_cycles() -> None:
    """No two modules of streamcap import each other, even through others or only for typing
    (issue 36: the last circle ran through a re-export). Tarjan's strongly connected components
    of grimp's import graph: each must be one module."""
    import grimp

    graph = grimp.build_graph("streamcap")
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    assert not cycles, cycles
