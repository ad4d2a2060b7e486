"""The ``enforce`` command, installed as a binary by this package.

:func:`find_enforce_bin` returns its path, for tools that start it::

    import subprocess, enforce_cli
    subprocess.run([enforce_cli.find_enforce_bin(), "check", "--profile", "chat", "answer.md"])
"""

from __future__ import annotations

import os
import sys
import sysconfig

__all__ = ["find_enforce_bin"]


def find_enforce_bin() -> str:
    """Returns the path of the ``enforce`` binary this package installed.

    Looks where pip puts scripts: this environment's scripts directory, then the user scheme's
    (``pip install --user``), then a ``bin`` directory beside the package (``pip install
    --target``). Raises :class:`FileNotFoundError` naming the last place looked at.
    """
    exe = "enforce" + (sysconfig.get_config_var("EXE") or "")
    candidates = [os.path.join(sysconfig.get_path("scripts"), exe)]
    if sys.version_info >= (3, 10):
        user_scheme = sysconfig.get_preferred_scheme("user")
    elif os.name == "nt":
        user_scheme = "nt_user"
    elif sys.platform == "darwin" and getattr(sys, "_framework", None):
        user_scheme = "osx_framework_user"
    else:
        user_scheme = "posix_user"
    candidates.append(os.path.join(sysconfig.get_path("scripts", scheme=user_scheme), exe))
    # pip install --target DIR puts the package in DIR and the script in DIR/bin.
    candidates.append(
        os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin", exe)
    )
    for path in candidates:
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(candidates[-1])
