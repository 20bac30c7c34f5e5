"""GradGraph and what is done to it without torch: folding by module (`view`), ×N groups
(`groups`), parameters placed in their module call (`scopes`), ghost nodes (`ghosts`)."""
