# -*- coding: utf-8 -*-
"""A service that leaks, for `pyinspect heap --diff`: a Starlette app under
uvicorn whose handler keeps what each request made in a module-level list.

GET /leak?n=N appends N Session objects to SESSIONS (and says how many it
holds); GET /ok leaks nothing. READY (with the port) once the server
listens. Needs uvicorn and starlette (.ci/asyncio-deps).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import asgi_util  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.responses import PlainTextResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

# The leak: every session a request opened, never let go.
SESSIONS = []


class Session(object):
    def __init__(self, user, n):
        self.user = user
        self.n = n


async def leak(request):
    n = int(request.query_params["n"])
    user = request.query_params.get("user", "anonymous")
    SESSIONS.extend(Session(user, i) for i in range(n))
    return PlainTextResponse("%d\n" % len(SESSIONS))


async def ok(request):
    return PlainTextResponse("ok\n")


app = Starlette(routes=[Route("/leak", leak), Route("/ok", ok)])


def main():
    asgi_util.serve(app)


if __name__ == "__main__":
    main()
