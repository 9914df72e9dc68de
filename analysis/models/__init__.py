"""Models as the project sees them: the bundled samples; find, validate and load a checkpoint (or stream one larger
than memory: stream/); forwards, with layer-prefix reuse; layer and channel geometry and key-dim plans; the inputs a
model reads; whether two models compare; the memory budget, limits and time estimates work is checked against."""
