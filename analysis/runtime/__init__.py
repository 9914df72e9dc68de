"""Running models here: fla's ops routed by device (pure-torch CPU ops), process setup, Ctrl-C, cancel."""
