"""One forward + backward of the user's model that leaves the model exactly as it was: the
stages over one RunState (`capture`, `stages`, `state`), the state swapped out and put back
(`model_state`), the backward itself (`backward`), the checks at the door (`checks`, `inputs`,
`devices`, `settings`) and the frozen result (`freeze`).

Named `run`, not `capture`: `gradviz_widgets.capture` is the public function.
"""
