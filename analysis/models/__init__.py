"""Models as the project sees them: find, validate and load; layer geometry; limits and time estimates; cards."""
