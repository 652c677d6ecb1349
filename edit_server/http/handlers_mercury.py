"""The Mercury Edit compatible routes (``/v1/fim/completions``, ``/v1/edit/completions``,
``/v1/apply/completions``), free of aiohttp; shapes and parsing in edit_server/http/mercury.py.

Each route answers JSON, ``"stream": true`` (the finished answer as OpenAI chunks, one per line, after the
show/hide gate has decided — a hidden suggestion is never half-sent) or ``"diffusing": true`` (one chunk
per denoising step with the whole canvas, still-masked positions as ``░``, then the final answer).

Apply merges deterministically when it can (edit_server/http/mercury.py ``merge_snippet``: the snippet's
lines between ``... existing code ...`` markers replace the original span between their first and last
lines found in the original); only a snippet with a chunk that has no line in the original goes to the
model, as a rewrite of the whole original with the snippet as context (a hidden rewrite: the original).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from edit_server.http import mercury as m
from edit_server.http.common import (
    Ctx,
    Reply,
    Stream,
    bad_prompt,
    doc_key,
    error,
    finish_reason,
    max_tokens,
    new_id,
    not_ready,
    too_long,
    usage,
)
from edit_server.http.zed import PromptError, apply_stops
from engine.templates import EditPrompt, FimPrompt, Section
from engine.types import StepCallback, StepEvent

log = logging.getLogger(__name__)
_apply_ids = itertools.count()


@dataclass
class Answer:
    text: str  # the answer's text / content
    finish: str = "stop"
    tokens: tuple[int, int] = (0, 0)  # usage: prompt, completion


Run = Callable[[StepCallback | None], Awaitable[Answer]]


def _frame(ctx: Ctx, ev: StepEvent) -> tuple[str, float]:
    tok = getattr(ctx.pipeline.worker.engine, "tokenizer", None)
    special = getattr(tok, "special", None)
    if special is None or not hasattr(tok, "decode_content"):
        return ev.text, 0.0
    return m.canvas_text(ev.canvas, special.mask, special.end_ids, tok.decode_content)


async def _serve(ctx: Ctx, opts: m.Options, run: Run, chat: bool,
                 shape: Callable[[str], str] = lambda t: t) -> Reply | Stream:
    """Run ``run`` and answer as JSON, a stream of deltas, or a stream of denoising frames."""
    rid, created, model = new_id("chatcmpl" if chat else "cmpl"), int(time.time()), ctx.model(opts.model)
    chunk = m.chat_chunk if chat else m.completion_chunk
    if not opts.stream:
        try:
            a = await run(None)
        except Exception as e:  # engine failure: report it, keep serving (details in the log)
            log.error("engine failed: %s", e)
            return error(500, str(e), "server_error")
        body = (m.chat if chat else m.completion)(rid, created, model, a.text, a.finish, a.tokens)
        return Reply(200, body)
    return Stream(_events(ctx, opts, run, chunk, rid, created, model, shape))


async def _events(ctx: Ctx, opts: m.Options, run: Run, chunk: Callable[..., dict[str, Any]], rid: str,
                  created: int, model: str, shape: Callable[[str], str]) -> AsyncIterator[dict[str, Any]]:
    loop = asyncio.get_running_loop()
    steps: asyncio.Queue[StepEvent] = asyncio.Queue()
    on_step = (lambda ev: loop.call_soon_threadsafe(steps.put_nowait, ev)) if opts.diffusing else None
    task = asyncio.ensure_future(run(on_step))
    try:
        while not task.done() or not steps.empty():
            get = asyncio.ensure_future(steps.get())
            await asyncio.wait({task, get}, return_when=asyncio.FIRST_COMPLETED)
            if not get.done():
                get.cancel()
                continue
            text, progress = _frame(ctx, get.result())
            yield chunk(rid, created, model, shape(text), None, progress)
        try:
            a = task.result()
        except Exception as e:  # engine failure mid-stream: an error event, then the stream ends
            log.error("engine failed: %s", e)
            yield {"error": {"message": str(e), "type": "server_error"}}
            return
        if opts.diffusing:  # the final frame is the answer itself
            yield chunk(rid, created, model, a.text, a.finish, 1.0)
        else:
            for piece in m.deltas(a.text):
                yield chunk(rid, created, model, piece, None)
        last = chunk(rid, created, model, None, a.finish)
        last["usage"] = {"prompt_tokens": a.tokens[0], "completion_tokens": a.tokens[1],
                         "total_tokens": sum(a.tokens)}
        yield last
    finally:
        if not task.done():  # the client went away: stop the generation between denoising steps
            task.cancel()


# ---- the routes ----------------------------------------------------------------------------------------
async def fim(ctx: Ctx, body: Any) -> Reply | Stream:
    try:
        req = m.parse_fim_body(body)
    except PromptError as e:
        return bad_prompt(e)
    if (r := await not_ready(ctx)) or (r := await too_long(ctx, req.prompt + req.suffix)):
        return r
    prompt = FimPrompt(prefix=req.prompt, suffix=req.suffix)

    async def run(on_step: StepCallback | None) -> Answer:
        sug = await ctx.pipeline.infill_prompt(doc_key(ctx, "fim", "", req.prompt), prompt,
                                               max_tokens(ctx, req.options.max_tokens), on_step)
        text, stopped = apply_stops(sug.text if sug is not None and sug.show else "", list(req.options.stop))
        return Answer(text, finish_reason(sug, stopped), usage(sug))

    return await _serve(ctx, req.options, run, chat=False)


async def edit(ctx: Ctx, body: Any) -> Reply | Stream:
    try:
        content, opts = m.parse_chat_body(body)
        prompt = m.parse_edit(content)
    except PromptError as e:
        return bad_prompt(e)
    if (r := await not_ready(ctx)) or (r := await too_long(ctx, content)):
        return r

    async def run(on_step: StepCallback | None) -> Answer:
        key = doc_key(ctx, "edit", prompt.path, prompt.before + prompt.region)
        ans = await ctx.pipeline.rewrite_prompt(key, prompt, on_step)
        sug = ans.suggestion if ans is not None else None
        new = sug.text if sug is not None and sug.show else None
        return Answer(m.edit_content(new, prompt.region), finish_reason(sug), usage(sug))

    return await _serve(ctx, opts, run, chat=True, shape=lambda t: m.edit_content(t, prompt.region))


async def apply(ctx: Ctx, body: Any) -> Reply | Stream:
    try:
        content, opts = m.parse_chat_body(body)
        original, snippet = m.parse_apply(content)
    except PromptError as e:
        return bad_prompt(e)
    merged = m.merge_snippet(original, snippet)
    if merged is None:  # a chunk the original has no line of: the model places it
        if (r := await not_ready(ctx)) or (r := await too_long(ctx, content)):
            return r
    prompt = EditPrompt(before="", region=original, after="", cursor=0,
                        sections=(Section(kind="update_snippet", path="update_snippet", text=snippet),))

    async def run(on_step: StepCallback | None) -> Answer:
        if merged is not None:
            return Answer(merged)
        key = f"http:{ctx.user}:apply:{next(_apply_ids)}"  # never superseded
        ans = await ctx.pipeline.rewrite_prompt(key, prompt, on_step)
        sug = ans.suggestion if ans is not None else None
        return Answer(sug.text if sug is not None and sug.show else original, finish_reason(sug), usage(sug))

    return await _serve(ctx, opts, run, chat=True)
