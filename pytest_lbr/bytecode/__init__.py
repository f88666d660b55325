"""BPF instructions and their control flow: the one home of both (pure: bytes in,
facts out; no kernel access).

`instructions`: decoding, opcodes, what an instruction is (a helper, kfunc or
subprogram call, a tail call, a jump), the calls left in a translated dump.
`flow`: blocks, dominators, reachability, and the calls that ran before a call.
Helper alignment (`programs.helper_calls`), calls proven by the code
(`capture.implied`) and coverage (`coverage.code`, `coverage.evidence`) all ask
these two modules. Tested by tests/bytecode/test_instructions.py and
tests/bytecode/test_flow.py.
"""
