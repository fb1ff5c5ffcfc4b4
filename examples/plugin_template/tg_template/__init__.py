"""tg-template: an example tg device plugin."""
