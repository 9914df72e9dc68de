"""Looking inside a model: recurrent states and their metrics, per-head rank trajectories, rank traces, the model
card, reports, the State lab."""
