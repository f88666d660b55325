"""`pytest-lbr bisect`: which commit changed a golden trace, with `git bisect run`.

`driver.py` checks the request, drives `git bisect start/run/reset` and sums up (the
first bad commit, the golden diff that made it bad, the commits that could not be
tested); `step.py` is what `git bisect run` starts at each commit
(`python -m pytest_lbr.bisect.step STATE_DIR`): build, run the golden tests, answer
good, bad or skip. Tested by tests/test_bisect.py and, in the guests, by
tests/kernel/test_bisect_program.py.
"""
