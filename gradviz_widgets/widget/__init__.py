"""The notebook UI of the explorer: ExplorerWidget (`explorer_widget`) over a session it knows by
a Protocol (`session`), its toolbar (`controls`, `actions`), chart (`chart`), compare mode
(`compare`), the plumbing that needs no widgets (`controller`), the graph pane (`graph_pane`, the
anywidget over the JS bundle in static/) and the marimo mirror (`marimo_mirror`, `marimo_esm`)."""
