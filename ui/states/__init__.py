"""The States & rank page's views."""
