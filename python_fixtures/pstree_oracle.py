"""CPython 3.14+'s own view of a process's asyncio tasks (the data behind
`python -m asyncio ps/pstree PID`), as JSON: one row per (task, awaiter)."""
import json
import sys

from asyncio import tools

rows = tools.build_task_table(tools.get_all_awaited_by(int(sys.argv[1])))
print(json.dumps([
    {"thread": r[0], "id": int(r[1], 16), "name": r[2], "stack": r[3],
     "awaiter": int(r[6], 16)}
    for r in rows
]))
