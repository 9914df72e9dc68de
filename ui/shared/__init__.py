"""What every page of the dashboard uses."""
