"""Hooks: what the user turned on (`plan`, `config`, `modifiers`), one run's hooks registered and
removed (`run`), the tensor-hook fallback (`fallback`) and when it is needed (`clash`), what the
hooks saw (`events`, `recorder`)."""
