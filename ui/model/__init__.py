"""The Model page's parts (its report export)."""
