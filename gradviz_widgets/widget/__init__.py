"""The notebook UI of the explorer: ExplorerWidget (`explorer_widget`), one class over a session
it knows by a Protocol (`session`) and follows (`GradExplorer.on_change`), composed of parts that
own their state: the toolbar (`controls`), the chart (`chart`), compare mode (`compare`),
settings changes and exports (`actions`), the graph pane (`graph_pane`, the anywidget over the
JS bundle in static/); the plumbing that needs no widgets (`controller`) and the marimo mirror
(`marimo_mirror`, `marimo_esm`)."""
