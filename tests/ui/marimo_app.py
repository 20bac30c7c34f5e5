"""A marimo notebook for tests/ui/test_marimo_ui.py: the dead-branch explorer in marimo.

``ex.show()`` inside marimo returns the same ExplorerWidget as in Jupyter, drawn whole by
marimo (gradviz_widgets/widget_marimo.py): toolbar, graph and chart side by side, hook
readout. A click on a graph node hooks its module and re-runs; the toolbar's controls act on
the widget in the kernel. See docs/frontends.md.

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
    return ex, mo


@app.cell
def _(ex):
    # the whole explorer: toolbar, graph, chart, readout
    ex.show()
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


if __name__ == "__main__":
    app.run()
