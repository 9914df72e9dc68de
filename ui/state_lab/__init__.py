"""The State lab page: one head's state token by token."""
