"""What a session shows people: `--lbr-report=DIR`'s text and HTML, and what feeds it.

`render.py` writes each traced test's trace as text and the session's self-contained
HTML page; `flame.py` makes its flame graphs (folded stacks, inline SVG); `record.py`
holds `TestRecord`, what one test traced, which the pytest session fills in and the
report reads (importing it costs nothing, so the plugin loads no report code without
`--lbr-report`). Tested by tests/test_report.py, test_flame.py and test_ftrace_parse.py.
"""
