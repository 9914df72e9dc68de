"""What the fla families share: the fla adapter base (`adapter`) and fla's per-layer pruned model types (`pruned`)."""
