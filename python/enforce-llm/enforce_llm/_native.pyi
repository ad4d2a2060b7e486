"""Type stubs of the native module (Rust, PyO3). Import from ``enforce_llm`` instead."""

import os
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union, final

_Path = Union[str, "os.PathLike[str]"]
_Messages = Union[str, List[Dict[str, Any]]]
_Context = Optional[Mapping[str, Any]]
_Judge = Optional[Callable[[List[Dict[str, Any]]], Union[str, Iterator[str]]]]

__version__: str

class ConfigError(ValueError):
    """A configuration file or profile that cannot be used; ``str(error)`` is the CLI's
    ``file:line:column: key: message``."""

@final
class Issue:
    """One finding of one validator."""

    @property
    def code(self) -> str:
        """Stable upper-case issue code, e.g. ``FORBIDDEN_PATTERN``."""
    @property
    def message(self) -> str:
        """What is wrong."""
    @property
    def hint(self) -> Optional[str]:
        """How to fix it, when the validator knows."""
    @property
    def line(self) -> Optional[int]:
        """1-based line in the text."""
    @property
    def column(self) -> Optional[int]:
        """1-based column (in characters) within ``line``."""
    @property
    def severity(self) -> str:
        """``"error"`` or ``"warning"``."""
    @property
    def validator(self) -> str:
        """The validator that found it."""
    @property
    def repairable(self) -> bool:
        """``False`` for a hard abort: asking the model again cannot help."""

@final
class Outcome:
    """The verdict of a check or a run."""

    @property
    def status(self) -> str:
        """``passed``, ``repaired``, ``unresolved``, ``unavailable`` or ``aborted``."""
    @property
    def ok(self) -> bool:
        """``True`` for ``passed`` and ``repaired``; also the outcome's truth value."""
    def __bool__(self) -> bool: ...
    @property
    def answer(self) -> Optional[str]:
        """The passing or repaired text, else the last answer as it came, or ``None``."""
    @property
    def issues(self) -> List[Issue]:
        """The errors left in ``answer``, then the warnings about it."""
    @property
    def codes(self) -> List[str]:
        """The codes of ``issues``, in order."""
    @property
    def attempts(self) -> int:
        """How many answers the model gave (0 for a check without a model)."""
    @property
    def stop_reason(self) -> str:
        """Why the loop stopped: ``clean``, ``retries_exhausted``, ``no_progress``, ..."""
    @property
    def repairs(self) -> List[str]:
        """The validators whose repairs made ``answer`` (empty unless ``repaired``)."""
    @property
    def error(self) -> Optional[str]:
        """The model's failure that ended the loop, or ``None``."""
    def to_json(self) -> str:
        """The audit record as one JSON line, as ``enforce`` writes it."""

@final
class Profile:
    """A loaded profile: validators, policy and the loop."""

    def __init__(
        self, profile: Optional[str] = None, config: Optional[_Path] = None, judge: _Judge = None
    ) -> None:
        """``judge``: the model of the profile's ``llm_judge`` validators (a plain function)."""
    @property
    def name(self) -> str:
        """The profile's name."""
    @property
    def validators(self) -> List[str]:
        """The names of its validators, in the order they run."""
    def check(self, text: str, context: _Context = None) -> Outcome:
        """Validates ``text`` without a model."""
    def repair(self, text: str, context: _Context = None) -> Outcome:
        """Validates ``text`` and applies the deterministic repairs."""
    def run(
        self,
        messages: _Messages,
        model: Callable[[List[Dict[str, Any]]], Union[str, Iterator[str]]],
        context: _Context = None,
    ) -> Outcome:
        """The loop with a synchronous ``model``; ``Enforcer`` adapts async ones."""

def check(
    text: str,
    profile: Optional[str] = None,
    config: Optional[_Path] = None,
    context: _Context = None,
    judge: _Judge = None,
) -> Outcome:
    """Validates ``text`` against a profile without a model."""

def repair(
    text: str,
    profile: Optional[str] = None,
    config: Optional[_Path] = None,
    context: _Context = None,
    judge: _Judge = None,
) -> Outcome:
    """Validates ``text`` and applies the deterministic repairs."""

def report(
    path: Union[_Path, Sequence[_Path]],
    since: Optional[str] = None,
) -> Dict[str, Any]:
    """The report of audit files (one path or a list): the ``enforce report --format json``
    document. ``since`` (``2026-11-23T08:00:00Z``, ``2026-11-23``, ``24h``) leaves out older
    records. A file that cannot be opened raises ``OSError``."""

def eval(
    dataset: _Path,
    model: Callable[[List[Dict[str, Any]]], Union[str, Iterator[str]]],
    config: Optional[_Path] = None,
    profile: Optional[str] = None,
    arms: Union[str, Sequence[str], None] = None,
    repeats: int = 1,
    seed: int = 0,
    concurrency: int = 1,
    output_dir: Optional[_Path] = None,
    judge: _Judge = None,
    stats: Optional[_Path] = None,
    stats_from: Optional[_Path] = None,
) -> Dict[str, Any]:
    """``enforce eval`` with a synchronous ``model``: the summary (``summary.json``) as a dict;
    ``enforce_llm.eval`` adapts async models."""
