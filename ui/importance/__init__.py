"""The Channel importance page's views."""
