"""The documented path of the CSV / JSON exports; they live in `gradviz_widgets.report.export`."""

from .report.export import CSV_COLUMNS, load_json, report_csv, report_json

__all__ = ["CSV_COLUMNS", "load_json", "report_csv", "report_json"]
