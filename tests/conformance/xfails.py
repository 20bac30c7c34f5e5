"""Expected failures of today's engine: (test, case) -> "issue 9.<item>: what is wrong".

Tests: norms, norms_hooked, status, module_norms, state_run, state_close (see test_zoo.py).
strict=True: a fix makes the test pass, the mark then fails the suite and must be removed.
"""

_RENORM = ("issue 9.inplace-param-write: nn.Embedding(max_norm=0.5) renormalises rows in place "
           "through the run's detached alias, so the user's emb.weight changes (value and "
           "_version)")
_PY_ATTRS = ("issue 9.python-attrs: forward's `self.calls += 1` persists on the model (0 -> 2 "
             "after run + hooked run); buffers and tensor attributes are restored, plain Python "
             "attributes are not")

XFAIL: dict[tuple[str, str], str] = {
    ("state_run", "embedding_max_norm"): _RENORM,
    ("state_close", "embedding_max_norm"): _RENORM,
    ("state_run", "forward_writes_state"): _PY_ATTRS,
    ("state_close", "forward_writes_state"): _PY_ATTRS,
}
