"""Compare with: the loaded model beside a pruned version, on States & rank and Query noise (each page imports
it; no other room does)."""
