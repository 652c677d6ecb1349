"""Named models (ORG/NAME[@REV]) against a local fake hub: download, pinning, offline, no pickles."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from engine.loading.common import CheckpointError
from engine.loading.hub import HubSpec, cached_snapshot, fetch, load_hub, parse_hub_spec

pytest.importorskip("transformers")

REPO = "tiny-org/tiny-dream"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OLD_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


class FakeHub:
    """Answers like the hub for one repo: model info (revision), file HEAD/GET (resolve) with
    ETag / X-Repo-Commit / Content-Length and byte ranges. Records every request path."""

    def __init__(self, files: dict[str, bytes], *, fail_after: dict[str, int] | None = None) -> None:
        self.files = files
        self.requests: list[tuple[str, str]] = []
        self.auth: list[str | None] = []  # Authorization header of every request
        self.fail_after = dict(fail_after or {})  # file -> serve only this many bytes once
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def _file(self) -> tuple[str, bytes] | None:
                m = re.match(rf"^/{re.escape(REPO)}/resolve/([^/]+)/(.+)$", self.path.split("?")[0])
                if not m or m.group(1) not in (COMMIT, "main") or m.group(2) not in hub.files:
                    return None
                return m.group(2), hub.files[m.group(2)]

            def _headers(self, name: str, data: bytes, status: int = 200, length: int | None = None) -> None:
                self.send_response(status)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
                self.send_header("Content-Length", str(len(data) if length is None else length))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()

            def do_HEAD(self) -> None:  # noqa: N802
                hub.requests.append(("HEAD", self.path))
                hub.auth.append(self.headers.get("Authorization"))
                f = self._file()
                if f is None:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.end_headers()
                    return
                self._headers(*f)

            def do_GET(self) -> None:  # noqa: N802
                hub.requests.append(("GET", self.path))
                hub.auth.append(self.headers.get("Authorization"))
                path = self.path.split("?")[0]
                if path.startswith(f"/api/models/{REPO}/revision/"):
                    rev = path.rsplit("/", 1)[1]
                    if rev not in ("main", COMMIT):
                        self.send_response(404)
                        self.send_header("X-Error-Code", "RevisionNotFound")
                        self.end_headers()
                        return
                    body = json.dumps({"id": REPO, "modelId": REPO, "sha": COMMIT, "private": False,
                                       "siblings": [{"rfilename": n, "size": len(d),
                                                     "blobId": hashlib.sha1(d).hexdigest()}
                                                    for n, d in hub.files.items()]}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                f = self._file()
                if f is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                name, data = f
                start = 0
                rng = self.headers.get("Range")
                if rng:
                    start = int(re.match(r"bytes=(\d+)-", rng).group(1))  # type: ignore[union-attr]
                chunk = data[start:]
                cut = hub.fail_after.pop(name, None)
                if rng:
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                    self.send_header("X-Repo-Commit", COMMIT)
                    self.send_header("Content-Length", str(len(chunk)))
                    self.end_headers()
                else:
                    self._headers(name, data)
                if cut is not None:  # a dropped connection mid-file
                    self.wfile.write(chunk[:cut])
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return
                self.wfile.write(chunk)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def fetched(self) -> set[str]:
        return {p.split("/resolve/", 1)[1].split("/", 1)[1] for m, p in self.requests
                if m == "GET" and "/resolve/" in p}


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    from tests.test_loading_hf import N_BASE, make_hf, write_tokenizer

    root = tmp_path_factory.mktemp("tiny-dream")
    make_hf(root, "qwen2", vocab=N_BASE + 1, shard="20KB")
    cfg = json.loads((root / "config.json").read_text())
    cfg.update(architectures=["DreamModel"], model_type="Dream", mask_token_id=N_BASE)
    (root / "config.json").write_text(json.dumps(cfg))
    write_tokenizer(root, extra=("<|mask|>",))
    files = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}
    files["pytorch_model.bin"] = b"\x80\x04 a pickle that must never be fetched"
    files["modeling_dream.py"] = b"raise SystemExit('remote code must never be fetched')"
    return files


@pytest.fixture
def hub_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    yield cache


def test_parse_hub_spec(tmp_path: Path) -> None:
    assert parse_hub_spec("Dream-org/Dream-Coder-v0-Instruct-7B") == HubSpec("Dream-org/Dream-Coder-v0-Instruct-7B")
    assert parse_hub_spec("apple/DiffuCoder-7B-Base@v1.0") == HubSpec("apple/DiffuCoder-7B-Base", "v1.0")
    assert parse_hub_spec(f"a/b@{COMMIT}") == HubSpec("a/b", COMMIT)
    for not_hub in ("tiny-random", "random:tiny", "default", "./x/y", "/abs/path", "~/m/x", "a/b/c",
                    "model.gguf"):
        assert parse_hub_spec(not_hub) is None, not_hub
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "name").mkdir()
    import os

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert parse_hub_spec("org/name") is None  # an existing local directory wins
    finally:
        os.chdir(cwd)


def test_download_load_pin_and_no_pickles(model_files: dict[str, bytes], hub_env: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int, str]] = []
    with FakeHub(model_files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        ck = load_hub(REPO, progress=lambda d, t, m: calls.append((d, t, m)))
        fetched = hub.fetched()
    assert "pytorch_model.bin" not in fetched and "modeling_dream.py" not in fetched
    assert {n for n in model_files if n.endswith(".safetensors")} <= fetched
    assert ck.meta["revision"] == COMMIT and ck.meta["hub_repo"] == REPO
    assert ck.meta["requested_revision"] == "main"
    assert ck.name == f"{REPO}@{COMMIT[:12]}"
    assert ck.args.attention == "bidirectional"  # DreamModel
    # progress: bytes only grow, the total is fixed from the start and is reached
    total = sum(len(d) for n, d in model_files.items() if n not in ("pytorch_model.bin", "modeling_dream.py"))
    assert calls and all(t == total for _, t, _ in calls)
    assert [d for d, _, _ in calls] == sorted(d for d, _, _ in calls) and calls[-1][0] == total
    snap = hub_env / f"models--{REPO.replace('/', '--')}"
    assert (snap / "refs" / "main").read_text() == COMMIT
    assert not list(snap.rglob("*.bin")) and not list(snap.rglob("*.py"))


def test_offline_cached_works_and_not_cached_errors(model_files: dict[str, bytes], hub_env: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError, match=r"tiny-org/tiny-dream is not in the Hugging Face cache .* "
                                              r"HF_HUB_OFFLINE is set.*edit-server check --model"):
        fetch(REPO)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with FakeHub(model_files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        fetch(REPO)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: any request would fail
    ck = load_hub(REPO)
    assert ck.meta["revision"] == COMMIT
    assert load_hub(f"{REPO}@{COMMIT}").meta["revision"] == COMMIT
    with pytest.raises(CheckpointError, match="not in the Hugging Face cache"):
        fetch(f"{REPO}@v2")  # a revision never fetched


def test_unreachable_hub_falls_back_to_cache_or_errors(model_files: dict[str, bytes], hub_env: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "1")
    with pytest.raises(CheckpointError, match="hub could not be reached"):
        fetch(REPO)
    with FakeHub(model_files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        fetch(REPO)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert fetch(REPO).commit == COMMIT


def test_interrupted_download_resumes(model_files: dict[str, bytes], hub_env: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    big = max((n for n in model_files if n.endswith(".safetensors")), key=lambda n: len(model_files[n]))
    with FakeHub(model_files, fail_after={big: len(model_files[big]) // 2}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        try:
            fetch(REPO)  # huggingface_hub may retry the broken transfer itself
        except Exception:
            fetch(REPO)  # or we run again: it continues from the partial file
        ranges = [p for m, p in hub.requests if m == "GET" and big in p]
    snap = cached_snapshot(HubSpec(REPO))
    assert snap is not None and (snap.path / big).read_bytes() == model_files[big]
    assert len(ranges) >= 2  # fetched in two parts, not restarted from scratch twice


def test_pickle_only_repo_is_refused(model_files: dict[str, bytes], hub_env: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    files = {n: d for n, d in model_files.items() if not n.endswith(".safetensors") and "index" not in n}
    with FakeHub(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        with pytest.raises(CheckpointError, match="only pickle weights .*pytorch_model.bin.*refusing"):
            fetch(REPO)
        assert not hub.fetched()


def test_missing_revision_is_named(model_files: dict[str, bytes], hub_env: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeHub(model_files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        with pytest.raises(CheckpointError, match="revision 'nope' not found"):
            fetch(f"{REPO}@nope")


def test_spec_loader_routes_hub_ids(model_files: dict[str, bytes], hub_env: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.specs import load_checkpoint_spec

    with FakeHub(model_files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        seen: list[int] = []
        ck = load_checkpoint_spec(REPO, progress=lambda d, t, m: seen.append(d))
    assert ck.meta["revision"] == COMMIT and seen


def test_hf_token_is_sent(model_files: dict[str, bytes], hub_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_test_token_123")
    with FakeHub(model_files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        fetch(REPO)
    assert hub.auth and all(a == "Bearer hf_test_token_123" for a in hub.auth)
