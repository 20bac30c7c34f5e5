"""Expected failures of today's engine: (test, case) -> "issue 9.<item>: what is wrong".

Tests: norms, norms_hooked, rerun, status, module_norms, state_run, state_close (test_zoo.py).
strict=True: a fix makes the test pass, the mark then fails the suite and must be removed.
Marks removed after the engine fixed them: inplace-param-write (nn.Embedding(max_norm), then any
forward writing into a weight: the run reruns with a copy of it) and python-attrs (forward's
`self.calls += 1`), both for state_run and state_close.
"""

XFAIL: dict[tuple[str, str], str] = {}
