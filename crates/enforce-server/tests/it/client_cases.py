"""What the Python client scripts share (openai_clients.py, anthropic_sdk.py): running one case
and printing it as one JSON line, and reading enforce's extra `enforcement` field off a client's
own type. A script imports it from its own directory (Python puts that first on sys.path).
"""

import asyncio
import inspect
import json

# One event loop for every async case: an async client stays on the loop it started on.
LOOP = asyncio.new_event_loop()


def case(name, run, status_error):
    """Runs `run(tag)` (the tag "(name)" goes into the case's question, so the server side can
    count how often the case reached the model; a coroutine is run on LOOP) and prints what it
    returned with `ok: true`, or the exception it raised: `status_error` (the client's HTTP
    status error class) with its status, anything else by its type."""
    try:
        result = run(f"({name})")
        if inspect.iscoroutine(result):
            result = LOOP.run_until_complete(result)
        result.setdefault("ok", True)
    except status_error as e:
        result = {
            "ok": False,
            "error": type(e).__name__,
            "status": e.status_code,
            "message": str(e),
        }
    except Exception as e:  # the client's own error types, or a wire-format failure
        result = {"ok": False, "error": type(e).__name__, "message": str(e)}
    result["case"] = name
    print(json.dumps(result), flush=True)


def enforcement(obj):
    """The `enforcement.status` a client kept of enforce's extra field (None without it)."""
    extra = getattr(obj, "model_extra", None) or {}
    return (extra.get("enforcement") or {}).get("status")
