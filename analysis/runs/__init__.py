"""Many measurements as one run: the sweep (cached points) and its Ray executor."""
