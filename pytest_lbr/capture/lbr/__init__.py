"""The LBR backend: the CPU's Last Branch Records, taken by the tracer's hooks.

`backend.py` probes whether LBR tracing can work here (and why not), and holds
`LbrBackend` (the hardware PMU), `LbrSoftwareBackend` (the same tracer on software perf
events, no branches) and `LbrCapture`, which arms the hooks, and drops the tracer's own
records off a hit's branches once they are named (`capture.trim`); `decode.py` turns
each snapshot into branches and a capture's records into a `Trace`. Tested by tests/test_lbr_decode.py, test_capture_protocol.py and, in
the guests, by tests/kernel/test_lbr_backend.py and test_lbr_stream.py.
"""
