"""Expected failures of today's engine: (test, case) -> "issue 9.<item>: what is wrong".

Tests: norms, norms_hooked, rerun, status, module_norms, state_run, state_close (test_zoo.py).
strict=True: a fix makes the test pass, the mark then fails the suite and must be removed.
Marks removed after the engine fixed them: inplace-param-write (nn.Embedding(max_norm)) and
python-attrs (forward's `self.calls += 1`), both for state_run and state_close.
"""

_CLAMP = ("issue 9.inplace-param-write: a forward that clamps lin.weight in place under no_grad "
          "(weight clipping) writes through the run's alias into the user's weight (value and "
          "_version change); the engine only reports it in findings")

XFAIL: dict[tuple[str, str], str] = {
    ("state_run", "forward_clamps_weight"): _CLAMP,
    ("state_close", "forward_clamps_weight"): _CLAMP,
}
