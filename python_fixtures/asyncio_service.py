# -*- coding: utf-8 -*-
"""A Starlette app under uvicorn on an asyncio loop in debug mode, with
`slow_callback_duration = 0.1`: asyncio itself logs (on stderr) every
callback that blocks the loop longer, "Executing <Task ...> took N seconds",
the oracle of `pyinspect watch`'s loop incidents.

GET /block?ms=N blocks the loop N ms in the handler; GET /fast does not.
READY (with the port) once the server listens. Needs uvicorn and
starlette (.ci/asyncio-deps).
"""
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import asgi_util  # noqa: E402
import fixture_util  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.responses import PlainTextResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

MARKS = fixture_util.markers(os.path.abspath(__file__))


async def block(request):
    ms = int(request.query_params["ms"])
    time.sleep(ms / 1000.0)  # MARK:block
    return PlainTextResponse("blocked %d\n" % ms)


async def fast(request):
    return PlainTextResponse("ok\n")


app = Starlette(routes=[Route("/block", block), Route("/fast", fast)])


def main():
    # Each line starts with its wall-clock time: when the callback ended.
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(created).6f %(name)s: %(message)s"
    )
    asgi_util.serve(app, {"block": fixture_util.frame(block, MARKS["block"])}, debug=True)


if __name__ == "__main__":
    main()
