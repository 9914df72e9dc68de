"""The Query noise page's views and tables."""
