"""GradExplorer, the session object a user holds (`session`): run, toggle hooks (`hook_methods`),
switch device, keep history, export the newest run (`exports`), show the widget."""
