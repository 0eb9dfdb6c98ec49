"""Dump line-table test vectors for src/python/linetable.rs.

Run under each interpreter (2.7 and 3.6+):

    for p in /root/.pyenv/versions/*/bin/python; do $p python_fixtures/gen_linetable_vectors.py; done

It compiles sample code, and for every code object records the raw table
(co_lnotab up to 3.9, co_linetable from 3.10), co_firstlineno, and the line
CPython's own C function PyCode_Addr2Line (called through ctypes, so the
oracle is the interpreter itself, not a re-implementation) returns at every
offset of the bytecode. Lines are run-length encoded as [count, line] pairs,
with null for "no line" (-1), to keep the files small.
"""
from __future__ import print_function

import binascii
import ctypes
import json
import os
import sys

SAMPLE = '''
def loop(n):
    total = 0
    for i in range(n):
        if i % 2:
            total += i
        else:
            total -= 1
    while total > 0:
        total -= 3
    return total

def multiline(a, b):
    x = (a +
         b *
         a)
    return multiline(
        a,
        b,
    ) if x else None

def with_try(path):
    try:
        fh = open(path)
    except IOError as e:
        return e
    finally:
        path = None
    with fh:
        data = fh.read()
    return data

def lambdas(xs):
    key = lambda v: (v,
                     -v)
    squares = [x * x for x in xs
               if x]
    return sorted(squares, key=key)

def decorated():
    @staticmethod



    def inner():
        pass
    return inner

def long_column(a):
    return a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a
'''


def far_lines():
    # Line jumps beyond one table byte in both directions, and one line with
    # more than 255 bytes of bytecode.
    gap = '\n' * 300
    return (
        'def far(a):\n'
        '    a = 1\n' + gap +
        '    while a:\n'
        '        a = a - 1\n' + gap +
        '        a = a + 0\n'
        '    b = f(a,\n' + gap +
        '          a)\n'
        '    c = [' + ', '.join(['a'] * 200) + ']\n'
        '    return b, c\n'
    )


SMALL = '''
def small(x):
    y = x * 2
    if y:
        return y
    return -y
'''


def no_column_code():
    # Unknown columns (-1) make 3.11+ emit "no column" (kind 13) entries,
    # which ordinary source never produces.
    import ast
    tree = ast.parse('def nocol(a):\n    b = a + 1\n\n\n    return b\n')
    for node in ast.walk(tree):
        if hasattr(node, 'col_offset'):
            node.col_offset = -1
            node.end_col_offset = -1
    return compile(tree, '<nocol>', 'exec')


def table_format():
    v = sys.version_info[:2]
    if v < (3, 0):
        return 'lnotab_unsigned'
    if v < (3, 10):
        return 'lnotab_signed'
    if v < (3, 11):
        return 'linetable310'
    return 'locations311'


def raw_table(co):
    if sys.version_info[:2] < (3, 10):
        return co.co_lnotab
    return co.co_linetable


def code_objects(co):
    yield co
    for c in co.co_consts:
        if hasattr(c, 'co_code'):
            for sub in code_objects(c):
                yield sub


def rle(values):
    out = []
    for v in values:
        if out and out[-1][1] == v:
            out[-1][0] += 1
        else:
            out.append([1, v])
    return out


def main():
    addr2line = ctypes.pythonapi.PyCode_Addr2Line
    addr2line.argtypes = [ctypes.py_object, ctypes.c_int]
    addr2line.restype = ctypes.c_int
    # Byte-granular on 2.7 (variable-length instructions); code units after.
    step = 1 if sys.version_info[0] == 2 else 2

    sources = [
        ('sample', SAMPLE),
        ('far', far_lines()),
        # Line numbers beyond 2**16.
        ('high', '\n' * 70000 + SMALL),
    ]
    tops = [(label, compile(src, '<%s>' % label, 'exec')) for label, src in sources]
    if sys.version_info[:2] >= (3, 11):
        tops.append(('nocol', no_column_code()))
    codes = []
    for label, top in tops:
        for co in code_objects(top):
            lines = []
            for off in range(0, len(co.co_code), step):
                line = addr2line(co, off)
                lines.append(None if line < 0 else line)
            if sys.version_info[:2] >= (3, 10):
                # Cross-check the oracle against co_lines().
                for start, end, line in co.co_lines():
                    for off in range(start, end, 2):
                        assert lines[off // 2] == line, (co, off, line)
            codes.append({
                'name': '%s:%s' % (label, co.co_name),
                'firstlineno': co.co_firstlineno,
                'table': binascii.hexlify(raw_table(co)).decode('ascii'),
                'code_len': len(co.co_code),
                'step': step,
                'lines': rle(lines),
            })

    out = {
        'version': '%d.%d.%d' % sys.version_info[:3],
        'format': table_format(),
        'codes': codes,
    }
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, '..', 'src', 'python', 'testdata',
                        'linetable_%d_%d.json' % sys.version_info[:2])
    with open(path, 'w') as fh:
        fh.write(json.dumps(out, sort_keys=True, separators=(',', ':')))
        fh.write('\n')
    print(path, len(codes), 'code objects')


if __name__ == '__main__':
    main()
