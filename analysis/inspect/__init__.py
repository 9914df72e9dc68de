"""Looking inside a model: recurrent states and their metrics, reports, the State lab."""
