"""The LBR tracer's BPF hooks, which both backends attach: the object and where it goes.

`tracer_object.py` finds the tracer object the wheel ships (bpf/lbr_tracer.bpf.c, built
per architecture) and reads its record layout from its BTF; `records.py` decodes its
ring-buffer records; `tracer_maps.py` keeps a session's spare sets of its large shared
maps and its programs as first loaded (loaded again for each new program); `hook_set.py` (`HookSet`) loads and attaches it at every target and reads its
hits, its three jobs in their own modules: `loader.py` (the objects, their config and
shared maps), `attacher.py` (each target hooked as its kind's module of `capture.kinds` says) and `ring.py`
(hits, losses, the armed switch), over the state `state.py` declares; `program_exits.py` keeps a session's fexit hooks on BPF programs while their
objects are open. Tested by tests/test_lbr_decode.py, test_fuzz_records.py,
test_kernel_btf.py, test_probe_lines.py, test_user_probes.py and, in the guests, by
tests/kernel/test_hooks.py, test_program_exits.py and test_tracer_maps.py.
"""
