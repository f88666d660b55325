"""The graph backend: a call trace from the kernel's function tracer, where there is no LBR.

`backend.py` holds `GraphBackend` and `GraphCapture` (armed and read per trace),
`probe.py` whether it works here and what it can do, `recorder.py` the session's
private tracefs instance (`GraphRecorder`, set up once); the rest is pure, so host
tests reach it with captured text: `text.py` reads the tracer's text as records,
`calls.py` nests one thread's records into calls and returns, `hits.py` cuts them
into hits, each target's as its kind says (`pytest_lbr.capture.kinds`), with
`branches.py` making a hit's branches of the nested calls, `own.py` and
`trampoline.py` recognise the tracer's own records and BPF trampolines among them,
`live_state.py` keeps a live capture's state between polls, and `narrow.py` finds the
call graph a system-wide trace is narrowed to. Tested by tests/test_ftrace_parse.py,
test_ftrace_fast_path.py, test_fuzz_ftrace.py, test_graph_narrow.py,
test_graph_softirq.py, test_live.py and, in the guests, by tests/kernel/test_graph.py
(recorder, backend).
"""
