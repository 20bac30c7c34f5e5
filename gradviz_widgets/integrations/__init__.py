"""GradWatch where people train: callbacks for Lightning and the Hugging Face Trainer.

Each framework's module imports that framework; this package imports neither, so the core
install needs neither (`pip install gradviz_widgets[lightning]` / `[transformers]`).

Example:
    >>> from gradviz_widgets.integrations.common import WatchRun
"""
