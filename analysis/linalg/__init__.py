"""Linear algebra on recurrent states: spectra, rank, query-noise bounds, RRQR, tracked singular values."""
