"""The Query noise page: its explanations and tables, and its two long works as jobs (the Monte Carlo, recall
accuracy against the SNR)."""
