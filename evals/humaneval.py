"""HumanEval-infilling: generate middles (engine API or the real server) and score pass@1 in the sandbox."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evals.datasets import InfillTask
from evals.metrics import normalize_ws
from evals.sandbox import Limits, run_python
from evals.store import ResultStore

if TYPE_CHECKING:
    from evals.lsp_client import LspClient

# the LSP client (pygls, lsprotocol) is imported only by the LSP runner: the engine runner must run on
# the GPU image, which has neither (`python -m evals humaneval-infill`, tests/test_evals_minimal_image.py)
log = logging.getLogger(__name__)
WHOLE_LINE_SPLITS = ("single-line", "multi-line")  # holes are whole lines: the editor has an empty line


def sampler_for(steps_mode: str, threshold: float, seed: int, **extra: Any) -> Any:
    """The eval's sampler; ``extra``: further `SamplerConfig` fields (window, remask, ...)."""
    from engine import SamplerConfig

    if steps_mode == "one-per-step":
        return SamplerConfig(strategy="topk", tokens_per_step=1, seed=seed, **extra)
    return SamplerConfig(strategy="threshold", threshold=threshold, seed=seed, **extra)


def sampler_options(window: str | None, remask: str, remask_threshold: float, remask_per_step: int,
                    remask_budget: int) -> dict[str, Any]:
    """CLI sampler options → `SamplerConfig` fields; only the ones that differ from the defaults
    (so a run's recorded configuration is unchanged when none is given)."""
    out: dict[str, Any] = {}
    if window is not None:
        if window not in ("block", "adaptive") and not (window.isdigit() and int(window) > 0):
            raise ValueError(f"--window {window!r}: expected block, adaptive or a positive size")
        out["window"] = int(window) if window.isdigit() else window
    if remask != "off":
        out.update(remask=remask, remask_threshold=remask_threshold, remask_per_step=remask_per_step,
                   remask_budget=remask_budget)
    return out


def whole_lines(split: str, prompt: str) -> bool:
    """Whether a task's hole is whole lines: a whole-line split's, its prompt ending at a line start (all of
    HumanEval-infilling's; a typed-line set, `scripts/humaneval_typed.py`, ends it part-way into the line, the
    line break right of the cursor in its suffix)."""
    return split in WHOLE_LINE_SPLITS and (not prompt or prompt.endswith("\n"))


def fix_middle(split: str, middle: str, prompt: str) -> str:
    """Whole-line holes end with a newline (single-line decoding stops before it); ``prompt``: the task's."""
    if whole_lines(split, prompt) and not middle.endswith("\n"):
        return middle + "\n"
    return middle


def score(task: InfillTask, middle: str, limits: Limits) -> dict[str, Any]:
    res = run_python(task.program(middle), limits)
    return {"status": res.status, "passed": res.passed, "stderr_tail": res.stderr_tail[-400:],
            "exact": normalize_ws(middle) == normalize_ws(task.canonical_solution)}


class Scorer:
    """Functional checks in a thread pool; each record is stored (cached) as soon as it is scored."""

    def __init__(self, store: ResultStore, limits: Limits, workers: int) -> None:
        self.store, self.limits = store, limits
        self.pool = ThreadPoolExecutor(max(1, workers))
        self.lock = threading.Lock()
        self.futures: list[Future] = []

    def submit(self, task: InfillTask, rec: dict[str, Any]) -> None:
        self.futures.append(self.pool.submit(self._one, task, rec))

    def _one(self, task: InfillTask, rec: dict[str, Any]) -> None:
        try:
            rec.update(score(task, rec["middle"], self.limits))
        except Exception as e:  # noqa: BLE001 - a check that cannot run is a recorded failure
            rec.update({"status": "error", "passed": False, "exact": False, "stderr_tail": "",
                        "error": rec.get("error") or f"check failed: {type(e).__name__}: {e}"})
        with self.lock:
            self.store.add(rec)

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        for f in self.futures:
            f.result()  # re-raise a checker failure


def generate_engine(tasks: list[InfillTask], scorer: Scorer, *, model: str, device: str, split: str,
                    max_tokens: int, steps_mode: str, threshold: float, seed: int,
                    sampler_extra: dict[str, Any] | None = None,
                    progress: Callable[[Iterable], Iterable] = iter, layout: str | None = None) -> None:
    """Generate each middle through ``Engine.infill`` and hand it to the scorer (with remasking on,
    each record also counts the positions put back to mask, from the per-step events)."""
    from engine import Engine, FimPrompt

    eng = Engine.load(model, device=device)
    sampler = sampler_for(steps_mode, threshold, seed, **(sampler_extra or {}))
    remasked: list[int] = []
    hook = (lambda ev: remasked.append(ev.remasked)) if sampler.remask != "off" else None
    for task in progress(tasks):
        t0 = time.perf_counter()
        remasked.clear()
        try:
            prompt = FimPrompt(task.prompt, task.suffix, path=f"{task.entry_point}.py")
            res = eng.infill(replace(prompt, layout=layout) if layout else prompt,
                             max_tokens=max_tokens, single_line=split == "single-line",
                             sampler=sampler, cache_key=f"humaneval:{task.task_id}", on_step=hook)
        except Exception as e:  # noqa: BLE001 - an engine failure is a recorded miss, not a crash
            scorer.submit(task, {"id": task.task_id, "middle": fix_middle(split, "", task.prompt), "error": str(e),
                                 "latency_ms": (time.perf_counter() - t0) * 1000})
            continue
        ms = (time.perf_counter() - t0) * 1000
        scorer.submit(task, {"id": task.task_id, "middle": fix_middle(split, res.text, task.prompt), "latency_ms": ms,
                     "tokens": len(res.tokens), "steps": res.steps, "forwards": res.forwards,
                     "tokens_per_forward": res.tokens_per_forward, "finish_reason": res.finish_reason,
                     "mean_confidence": res.mean_confidence, "engine_ms": res.timings.get("total_ms"),
                     **({"remasked": sum(remasked)} if hook is not None else {})})


def completion_edit(text: str, offset: int, result: Any) -> tuple[int, int, str, float | None] | None:
    """(start, end, new text, gate score) of the first inline-completion item, or None."""
    items = result.get("items", []) if isinstance(result, dict) else (result or [])
    if not items:
        return None
    from evals.lsp_client import offset_of

    item = items[0]
    ins = item.get("insertText", "")
    if isinstance(ins, dict):  # StringValue (snippet)
        ins = ins.get("value", "")
    start = end = offset
    if item.get("range"):
        start, end = offset_of(text, item["range"]["start"]), offset_of(text, item["range"]["end"])
    return start, end, ins, command_score(item)


def command_arg(item: dict[str, Any], key: str) -> Any:
    """``key`` of the accept command's argument object (the server's gate score, a next edit's origin)."""
    cmd = item.get("command") or {}
    for arg in cmd.get("arguments") or ():
        if isinstance(arg, dict) and key in arg:
            return arg[key]
    return None


def command_score(item: dict[str, Any]) -> float | None:
    s = command_arg(item, "score")
    return float(s) if isinstance(s, int | float) else None


async def _start(model: str, device: str, root: Path, log_path: Path, timeout: float,
                 init_extra: dict[str, Any]) -> LspClient:
    from evals.lsp_client import LspClient, server_command, warm_up

    client = LspClient(server_command(model, device), cwd=root, stderr_path=log_path)
    opts = {"model": model, "device": device, "gate": {"enabled": False}, "debounceMs": 0, **init_extra}
    await client.start(root, opts, timeout=timeout)
    await client.wait_ready(timeout)
    await warm_up(client, root, timeout)
    return client


async def _one_lsp(client: LspClient, i: int, task: InfillTask, split: str, root: Path,
                   timeout: float, trigger: str = "invoked") -> dict[str, Any]:
    from evals.lsp_client import TRIGGER_KINDS, utf16_position

    gap = "\n" if whole_lines(split, task.prompt) else ""  # the hole's empty line
    text = task.prompt + gap + task.suffix
    offset = len(task.prompt)
    path = root / "humaneval" / f"task_{i:05d}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    uri = path.resolve().as_uri()
    await client.notify("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": text}})
    t0 = time.perf_counter()
    err = None
    try:
        result = await client.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": utf16_position(text, offset),
            "context": {"triggerKind": TRIGGER_KINDS[trigger]}}, timeout=timeout)
    except Exception as e:  # noqa: BLE001 - a failed request is a recorded miss
        result, err = None, str(e)
    ms = (time.perf_counter() - t0) * 1000
    # each task alone: gone from the disk before it closes, so the server's workspace index never holds it
    # (a closed file on disk is indexed; the next task's context then showed this task's function, holes and
    # all, as a "definition": 5 of HumanEval/0-13's single-line tasks answered nothing through the server)
    path.unlink(missing_ok=True)
    await client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    edit = completion_edit(text, offset, result)
    new = text if edit is None else text[: edit[0]] + edit[2] + text[edit[1]:]
    ok = new.startswith(task.prompt) and new.endswith(task.suffix) and \
        len(new) >= len(task.prompt) + len(task.suffix)
    middle = new[len(task.prompt): len(new) - len(task.suffix)] if ok else ""
    return {"id": task.task_id, "middle": middle, "latency_ms": ms, "shown": edit is not None and bool(edit[2]),
            "error": err, "score": edit[3] if edit else None, "edited_outside_hole": not ok}


async def _generate_lsp(tasks: list[InfillTask], scorer: Scorer, *, model: str, device: str, split: str, root: Path,
                        log_path: Path, timeout: float, init_extra: dict[str, Any],
                        progress: Callable[[Iterable], Iterable], trigger: str = "invoked") -> None:
    """Each task through the real server; a task that breaks the server is recorded as an error (a
    miss) and the server is restarted for the next one. A server that cannot start raises. ``trigger``:
    each request as the user's explicit invoke ("invoked": the server may answer a block on an empty line)
    or as the editor's own while typing ("automatic": one line unless a block is expected there)."""
    client: LspClient | None = None
    try:
        for i, task in enumerate(progress(tasks)):
            if client is None:
                client = await _start(model, device, root, log_path, timeout, init_extra)
            try:
                rec = await _one_lsp(client, i, task, split, root, timeout, trigger)
            except Exception as e:  # noqa: BLE001 - recorded; the run goes on with a fresh server
                log.warning("task %s failed: %s", task.task_id, e)
                rec = {"id": task.task_id, "middle": fix_middle(split, "", task.prompt), "latency_ms": None,
                       "shown": False, "error": f"{type(e).__name__}: {e}", "score": None,
                       "edited_outside_hole": False}
                try:
                    await client.stop()
                except Exception:  # noqa: BLE001 - replaced anyway
                    pass
                client = None
            scorer.submit(task, rec)
    finally:
        if client is not None:
            await client.stop()


def generate_lsp(tasks: list[InfillTask], scorer: Scorer, **kw: Any) -> None:
    asyncio.run(_generate_lsp(tasks, scorer, **kw))
