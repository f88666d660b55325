"""What is known about a loaded BPF program, asked of the kernel in one place.

`info.py` iterates program ids and reads `bpf_prog_info` (with the arrays a caller
asks for) and the program's BTF names; `find.py` resolves a program target (id, name,
tag, pin, fd) to a live program that stays loaded while it is traced; `lines.py` maps
addresses in JITed code to the function and C source line (`BpfPrograms`, read lazily
per program); `helper_calls.py` matches the helper calls a program's source makes with
what the kernel runs for them (call, map rewrite, inlined, tail call), from the
instructions a loader loaded each program from (`written.py`: the loader's book, handed
to the reader). The symbolizer, the backends and the selftest read programs through
here. Tested by tests/programs/test_find.py, test_helper_calls.py, test_written.py,
tests/test_symbols.py (lines of programs loaded and unloaded),
tests/conformance/test_reasons.py (info, written) and, in the guests, by
tests/kernel/test_bpf_lines.py and test_bcc_target.py.
"""
