"""The heads study, shown on three pages: head groups on States & rank, the Heads view of Channel importance
and the partner head of the State lab (each page imports it; no other room does)."""
