"""Many measurements as one run: the sweep (cached points), heads vs dk at equal state budgets, the heads study,
and the offline HTML report (its data and its page)."""
