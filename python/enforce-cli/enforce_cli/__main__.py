"""``python -m enforce_cli ARGS``: runs the ``enforce`` binary with ARGS."""

import os
import sys

from enforce_cli import find_enforce_bin


def main() -> None:
    enforce = os.fsdecode(find_enforce_bin())
    if sys.platform == "win32":
        import subprocess

        sys.exit(subprocess.run([enforce, *sys.argv[1:]]).returncode)
    os.execv(enforce, [enforce, *sys.argv[1:]])


if __name__ == "__main__":
    main()
