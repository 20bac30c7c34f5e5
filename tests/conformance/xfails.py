"""Expected failures of today's engine: (test, case) -> "issue 9.<item>: what is wrong".

strict=True: a fix makes the test pass, the mark then fails the suite and must be removed.
"""

XFAIL: dict[tuple[str, str], str] = {
}
