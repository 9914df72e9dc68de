"""Models larger than memory: a checkpoint read one block at a time within a memory budget (issue 30).

files.py (the safetensors files of a checkpoint, read tensor by tensor at their offsets), skeleton.py (the model
built without memory, and one unit of its weights materialised and released), hidden.py (hidden states between
blocks, in memory or spilled to a temporary file), runner.py (batches pushed through every block in turn),
model.py (StreamedModel: what the rest of the core holds instead of a model), plan.py (when to stream, and the
one-line message that says so).
"""
