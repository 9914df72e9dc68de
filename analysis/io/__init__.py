"""Everything the project writes goes through this package (docs/guarantees.md).

- `writes`: atomic file and model-directory writes, the marker that says what the tool wrote, refusals.
- `json_out`: the CLI's JSON (non-finite numbers become null, written atomically).
- `model_dir`: a model (+ tokenizer + JSON side files) saved as one atomic directory.
- `trainer_state`: a training checkpoint's optimizer/RNG state as safetensors + JSON (never a pickle).
- `export`: a saved model as a zip for download.
- `point_cache`: the one cache of computed points (sweep, sensitivity map); entries are believed only when
  they prove themselves. `point_identity`: its key parts, the model identity and the code hash.
"""
