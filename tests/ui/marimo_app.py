"""A marimo notebook for tests/ui/test_marimo_ui.py: the dead-branch explorer in marimo.

marimo renders anywidgets natively but shows "Jupyter widgets are not supported in marimo"
for classic ipywidgets (no ``_esm``), so the composite ExplorerWidget (an ipywidgets VBox)
does not render; its two anywidget parts do: ``w.pane`` (the GraphPane) and ``w.chart``
(plotly's FigureWidget). A click on a graph node still reaches ExplorerWidget.click_node in
the kernel, which hooks the module, re-runs and updates both parts. See docs/frontends.md.

Run by hand: ``marimo edit tests/ui/marimo_app.py`` (or ``marimo run``).
"""

# ruff: noqa: B018  (a marimo cell shows its last expression)
import marimo

app = marimo.App(width="full")


@app.cell
def _():
    import marimo as mo
    from torch import nn

    from gradviz_widgets import GradExplorer
    from gradviz_widgets.examples import dead_branch_example

    net, x, y = dead_branch_example()
    ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    w = ex.show()
    return ex, mo, w


@app.cell
def _(w):
    # the graph (an anywidget): renders in marimo, clicks reach Python
    w.pane
    return


@app.cell
def _(w):
    # the norms chart (plotly's FigureWidget is an anywidget too)
    w.chart
    return


@app.cell
def _(mo):
    # press to re-read the explorer's hooks from the kernel (marimo re-runs the cell below)
    check = mo.ui.run_button(label="show hooks")
    check
    return (check,)


@app.cell
def _(check, ex, mo):
    mo.stop(not check.value)
    mo.md(f"<span class='gvt-hooks'>hooks: {sorted(map(tuple, ex.hooks))}</span>")
    return


@app.cell
def _(w):
    # the composite ExplorerWidget (an ipywidgets VBox, not an anywidget): marimo shows a
    # "Jupyter widgets are not supported" banner here
    w
    return


if __name__ == "__main__":
    app.run()
