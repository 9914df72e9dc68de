"""Everything the project writes goes through this package (docs/guarantees.md).

- `writes`: atomic file and model-directory writes, the marker that says what the tool wrote, refusals.
- `json_out`: the CLI's JSON (non-finite numbers become null, written atomically).
- `model_dir`: a model (+ tokenizer + JSON side files) saved as one atomic directory.
- `trainer_state`: a training checkpoint's optimizer/RNG state as safetensors + JSON (never a pickle).
- `export`: a saved model as a zip for download.
- `point_cache`: the one cache of computed points (sweep, sensitivity map); entries are believed only when
  they prove themselves. `point_identity`: its key parts, the model identity and the code hash.
- `points` + `ray_executor`: the one executor of independent points, in-process or as Ray tasks, through that cache.
- `swap`: the directory swap behind `write_model_dir`; `marker`: the names and kinds of what the tool wrote.
- `shards`: safetensors written tensor by tensor (a model larger than memory saved block by block).
- `reads`: a file a user named, read the hostile-file way (bounded, regular files only).
- `recovery_state`: a stopped recovery's state, to resume; `pruned_card`, `card_files`, `report_file`: the model
  card of a saved prune, where `card` and `report --out` may write.
"""
