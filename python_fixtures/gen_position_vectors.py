"""Dump position test vectors for src/python/linetable.rs (3.11+).

    for v in 3.11.7 3.12.1 3.13.0; do /root/.pyenv/versions/$v/bin/python python_fixtures/gen_position_vectors.py; done

For every code object compiled from the sample (and from this file's own
imports, for variety), records the raw location table and what the
interpreter's own `co_positions()` answers for each code unit, run-length
encoded as [count, end_line, column, end_column] (null where None).
"""
import json
import os
import sys
import textwrap

SAMPLE = textwrap.dedent('''
    def f(a, b):
        x = (a +
             b)
        y = [i * 2 for i in range(a) if i % 3]
        try:
            z = {k: v for k, v in zip(a, b)}
        except Exception as e:
            raise ValueError("bad") from e
        return x, y, z

    class C:
        def m(self, very_long_argument_name_number_one, very_long_argument_name_number_two):
            return (very_long_argument_name_number_one.attribute_access_that_is_long
                    + very_long_argument_name_number_two.another_attribute_access_far_right_column)

    async def g():
        async with ctx() as c:
            await c.run()
''')


def codes(co):
    yield co
    for c in co.co_consts:
        if hasattr(c, "co_code"):
            for x in codes(c):
                yield x


def rle(positions):
    out = []
    for p in positions:
        key = [p[1], p[2], p[3]]
        if out and out[-1][1:] == key:
            out[-1][0] += 1
        else:
            out.append([1] + key)
    return out


def main():
    import json as mod_json
    import textwrap as mod_textwrap

    sources = [compile(SAMPLE, "<sample>", "exec")]
    for m in (mod_json.decoder, mod_json.encoder, mod_textwrap):
        with open(m.__file__) as f:
            sources.append(compile(f.read(), m.__file__, "exec"))
    out = []
    for top in sources:
        for co in codes(top):
            out.append(
                {
                    "name": co.co_qualname,
                    "firstlineno": co.co_firstlineno,
                    "table": co.co_linetable.hex(),
                    "positions": rle(co.co_positions()),
                }
            )
    v = sys.version_info
    path = os.path.join(
        os.path.dirname(os.path.abspath(__file__)),
        "..", "src", "python", "testdata", "positions_%d_%d.json" % (v[0], v[1]),
    )
    with open(path, "w") as f:
        json.dump({"version": "%d.%d" % (v[0], v[1]), "codes": out}, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
