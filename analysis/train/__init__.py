"""Training the small sample models reproducibly."""
