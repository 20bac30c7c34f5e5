"""GradExplorer, the session object a user holds (`session`, one class in one file): run,
toggle hooks and modifiers, switch device, keep history, export the newest run, show the widget."""
