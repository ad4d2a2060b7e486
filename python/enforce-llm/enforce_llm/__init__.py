"""enforce in Python: make LLM output meet a contract, in-process.

Validators, re-asks with feedback, deterministic repairs and a typed outcome, run by the same
Rust code as the ``enforce`` CLI and proxy::

    import enforce_llm

    outcome = enforce_llm.check("Which database?", profile="chat")
    outcome.status          # "unresolved"
    outcome.issues[0].code  # "MISSING_STEP_MARKER"

    def model(messages):    # your own client: openai, litellm, LangChain, ...
        return client.chat.completions.create(model="gpt-4o-mini", messages=messages)\\
            .choices[0].message.content

    outcome = enforce_llm.Enforcer(profile="chat", model=model).run("Which database?")

    # Does re-asking pay, on this model? The arms' valid answers, tokens and time:
    summary = enforce_llm.eval("cases.jsonl", model, profile="chat", arms="none,feedback")
    [(arm["arm"], arm["valid"]["k"]) for arm in summary["arms"]]

Profiles come from ``config`` (an ``enforce.yaml``; default ``./enforce.yaml`` when it exists)
or the built-in ones (``chat``, ``adr``); plugins load from the usual directories, as for the
CLI. A bad file raises :class:`ConfigError` with the CLI's ``file:line:column: key: message``.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Union,
)

from . import _native
from ._native import ConfigError, Issue, Outcome, Profile, __version__, check, repair, report

__all__ = [
    "ConfigError",
    "Enforcer",
    "Issue",
    "Judge",
    "Message",
    "Model",
    "Outcome",
    "Profile",
    "check",
    "repair",
    "report",
    "__version__",
]
# `eval` is left out of `__all__`: `from enforce_llm import *` would hide the builtin `eval`.

Message = Dict[str, Any]
"""One message: ``{"role": "system" | "user" | "assistant" | "tool", "content": str}``."""

ModelAnswer = Union[str, Iterator[str], AsyncIterator[str], Awaitable[Any]]

Model = Callable[[List[Message]], ModelAnswer]
"""A model: called with the conversation, returns the answer as a string, an iterator or an
async iterator of string chunks, or an awaitable of either (an ``async def`` function)."""

Judge = Callable[[List[Message]], Union[str, Iterator[str]]]
"""The model of ``llm_judge`` validators: called with the judge's question as messages, returns
its verdict (``YES``/``NO`` and a reason, or the JSON form) as a string or an iterator of string
chunks. A plain function: an ``async def`` judge is refused with ``TypeError``."""

PathLike = Union[str, "os.PathLike[str]"]


class Enforcer:
    """A profile and a model: the re-ask loop with your own client as the model.

    ``model(messages)`` receives the conversation as a list of message dicts. On a re-ask it
    holds the original messages, the previous answer (``assistant``) and a ``user`` message with
    the feedback naming every error (code, message, line, hint). It returns the answer as a
    string, or an iterator of string chunks (streaming: an early abort stops consuming it and
    closes it); it may be an ``async def`` function or return an async iterator.

    The loop, the validators and the repairs run in Rust with the GIL released; only the calls
    of ``model`` (and ``judge``) take it.

    ``judge`` is the model of the profile's ``llm_judge`` validators (in the CLI and the proxy,
    their ``runner:``): a plain function ``judge(messages) -> str`` given the judge's question;
    without it such a validator raises :class:`ConfigError`.
    """

    def __init__(
        self,
        profile: Optional[str] = None,
        model: Optional[Model] = None,
        config: Optional[PathLike] = None,
        judge: Optional[Judge] = None,
    ) -> None:
        self._profile = Profile(profile, _path(config), judge)
        self._model = model

    @property
    def profile(self) -> Profile:
        """The loaded profile."""
        return self._profile

    def check(self, text: str, context: Optional[Mapping[str, Any]] = None) -> Outcome:
        """Validates ``text`` without asking the model."""
        return self._profile.check(text, _dict(context))

    def repair(self, text: str, context: Optional[Mapping[str, Any]] = None) -> Outcome:
        """Validates ``text`` and applies the deterministic repairs."""
        return self._profile.repair(text, _dict(context))

    def run(
        self,
        prompt_or_messages: Union[str, Sequence[Message]],
        context: Optional[Mapping[str, Any]] = None,
    ) -> Outcome:
        """Asks the model, validates, re-asks with feedback, repairs; returns the outcome.

        An ``async`` model is run on an event loop of this call's own; inside a running event
        loop, use :meth:`arun`.
        """
        model = self._require_model()
        loop: Optional[asyncio.AbstractEventLoop] = None

        def call(messages: List[Message]) -> Union[str, Iterator[str]]:
            nonlocal loop
            answer = model(messages)
            if inspect.isawaitable(answer) or hasattr(answer, "__aiter__"):
                if loop is None:
                    loop = asyncio.new_event_loop()
                return _on_loop(answer, loop.run_until_complete)
            return answer

        try:
            return self._profile.run(_messages(prompt_or_messages), call, _dict(context))
        finally:
            if loop is not None:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

    async def arun(
        self,
        prompt_or_messages: Union[str, Sequence[Message]],
        context: Optional[Mapping[str, Any]] = None,
    ) -> Outcome:
        """:meth:`run` for async code: the loop runs on a worker thread, and the model's
        coroutines and async iterators run on the caller's event loop, which stays free."""
        model = self._require_model()
        loop = asyncio.get_running_loop()

        def on_caller_loop(awaitable: Awaitable[Any]) -> Any:
            return asyncio.run_coroutine_threadsafe(_await(awaitable), loop).result()

        def call(messages: List[Message]) -> Union[str, Iterator[str]]:
            answer = model(messages)
            if inspect.isawaitable(answer) or hasattr(answer, "__aiter__"):
                return _on_loop(answer, on_caller_loop)
            return answer

        messages = _messages(prompt_or_messages)
        return await loop.run_in_executor(
            None, self._profile.run, messages, call, _dict(context)
        )

    def _require_model(self) -> Model:
        if self._model is None:
            raise TypeError("this Enforcer has no model: pass model=... to ask one")
        return self._model

    def __repr__(self) -> str:
        return f"Enforcer(profile={self._profile.name!r}, model={self._model!r})"


def eval(  # noqa: A001 (the name is enforce's command: `enforce_llm.eval`)
    dataset: PathLike,
    model: Model,
    config: Optional[PathLike] = None,
    profile: Optional[str] = None,
    arms: Union[str, Sequence[str], None] = None,
    repeats: int = 1,
    seed: int = 0,
    concurrency: int = 1,
    output_dir: Optional[PathLike] = None,
    judge: Optional[Judge] = None,
    stats: Optional[PathLike] = None,
    stats_from: Optional[PathLike] = None,
) -> Dict[str, Any]:
    """Does enforcing pay, on your model? ``enforce eval`` with ``model`` as the model.

    Runs ``dataset`` (JSONL, one case a line: ``{"prompt": ...}`` or ``{"messages": [...]}``,
    with optional ``id``, ``context`` and ``profile``; or promptfoo-style YAML) through
    ``profile`` (default: the configuration's default, else ``chat``) once per arm, ``repeats``
    times each, and returns the summary as a dict, what ``summary.json`` holds: per arm
    (``summary["arms"]``) the first-attempt pass rate, ``valid`` (``k`` of ``n``, with its 95 %
    Wilson interval), the outcomes, tokens and time per valid answer; per issue code how each
    arm fares; every pair of arms compared.

    ``arms`` is a comma-separated string or a list (default
    ``none,resample,feedback,feedback+abort,repair-first``); the words are those of
    ``enforce eval --help``. ``model`` is called as by :class:`Enforcer` (a string, an
    iterator, or async); it gets the messages only: the per-request ``seed`` (``seed`` + the
    index of the case and repeat) is in the records, and no decoding constraint reaches it.
    ``concurrency`` trials run at once, each on a thread of its own. With ``output_dir`` the
    files of ``enforce eval -o`` are written there (a rerun resumes the trials recorded);
    without, nothing is written.

    With ``stats`` (a path) the re-asks the trials measured are added to that strategy
    statistics file (created when missing), as ``enforce eval --stats`` adds them: the file
    ``reask_auto.stats`` reads. ``stats_from`` (a path) is the statistics file the arm ``auto``
    chooses by, learned by another eval (required by that arm), as ``--stats-from``.

    Raises :class:`ConfigError` for the configuration, ``ValueError`` for bad input (the
    dataset, an arm, an unknown profile), ``OSError`` when the results cannot be written.
    """
    with _AsyncModel(model) as call:
        return _native.eval(
            os.fspath(dataset),
            call,
            config=_path(config),
            profile=profile,
            arms=arms if arms is None or isinstance(arms, str) else list(arms),
            repeats=repeats,
            seed=seed,
            concurrency=concurrency,
            output_dir=_path(output_dir),
            judge=judge,
            stats=_path(stats),
            stats_from=_path(stats_from),
        )


class _AsyncModel:
    """``model`` as the plain callable the native loop takes, called from any thread: its
    coroutines and async iterators run on one event loop of its own, on a thread started when
    the first one comes and stopped on exit."""

    def __init__(self, model: Model) -> None:
        self._model = model
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    def __enter__(self) -> Callable[[List[Message]], Union[str, Iterator[str]]]:
        return self._call

    def __exit__(self, *_: Any) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(loop.shutdown_asyncgens(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    def _call(self, messages: List[Message]) -> Union[str, Iterator[str]]:
        answer = self._model(messages)
        if inspect.isawaitable(answer) or hasattr(answer, "__aiter__"):
            return _on_loop(answer, self._wait)
        return answer

    def _wait(self, awaitable: Awaitable[Any]) -> Any:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="enforce-llm-eval", daemon=True
                )
                self._thread.start()
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(_await(awaitable), loop).result()


def _on_loop(answer: Any, wait: Callable[[Awaitable[Any]], Any]) -> Union[str, Iterator[str]]:
    """An awaitable or async iterator as what the native loop takes: a string or a plain
    iterator, each step waited for with ``wait``."""
    if inspect.isawaitable(answer):
        answer = wait(answer)
    if hasattr(answer, "__aiter__"):
        return _AsyncChunks(answer.__aiter__(), wait)
    return answer


class _AsyncChunks:
    """An async iterator read as a plain one; ``close()`` (called by the loop when it stops
    consuming) closes the async iterator too."""

    def __init__(self, chunks: AsyncIterator[str], wait: Callable[[Awaitable[Any]], Any]):
        self._chunks = chunks
        self._wait = wait
        self._closed = False
        self._lock = threading.Lock()

    def __iter__(self) -> "_AsyncChunks":
        return self

    def __next__(self) -> str:
        try:
            return self._wait(self._chunks.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        aclose = getattr(self._chunks, "aclose", None)
        if aclose is not None:
            self._wait(aclose())


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _path(config: Optional[PathLike]) -> Optional[str]:
    return None if config is None else os.fspath(config)


def _dict(context: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    return None if context is None else dict(context)


def _messages(prompt_or_messages: Union[str, Sequence[Message]]) -> Union[str, List[Message]]:
    if isinstance(prompt_or_messages, str):
        return prompt_or_messages
    return [dict(m) for m in prompt_or_messages]
