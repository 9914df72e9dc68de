"""The recovery's loss curve: CE, KD and total per step, and validation perplexity at its checks."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

MIN_SPAN = 0.02   # the validation axis spans at least ±1 % of its values: a 0.05 % change must not fill the chart
METHOD_LABELS = {"qk": "q/k rows at full rank", "lora": "LoRA on q/k/v + conv/norm/bias",
                 "lora-kd": "LoRA + distillation from the unpruned model"}


def loss_figure(events: list[dict], validation: list[dict] | None = None) -> go.Figure:
    """`events`: recover()'s progress events (or its history, all training steps); `validation`: its
    validation checks when not among the events."""
    train = [e for e in events if e.get("kind", "train") == "train"]
    checks = validation if validation is not None else [e for e in events if e.get("kind") == "validation"]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    steps = [e["step"] for e in train]
    fig.add_trace(go.Scatter(x=steps, y=[e["loss"] for e in train], name="total loss (nats/token)"))
    fig.add_trace(go.Scatter(x=steps, y=[e["ce"] for e in train], name="cross-entropy", line=dict(dash="dot")))
    if any(e.get("kd") is not None for e in train):
        fig.add_trace(go.Scatter(x=steps, y=[e["kd"] for e in train], name="KD term (KL·T²)", line=dict(dash="dash")))
    fig.add_trace(go.Scatter(x=[c["step"] for c in checks], y=[c["perplexity"] for c in checks], mode="lines+markers",
                             name="validation perplexity"), secondary_y=True)
    fig.update_layout(height=300, margin=dict(l=10, r=10, t=30, b=10), title="Recovery: training loss per step")
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="loss (nats/token)", secondary_y=False)
    values = [c["perplexity"] for c in checks if c.get("perplexity") is not None]
    span = {}
    if values:  # ticks at a precision that matches the change, and never a zoom into the noise
        middle, half = (max(values) + min(values)) / 2, max(max(values) - min(values), MIN_SPAN * min(values)) / 2
        span = dict(range=[middle - 1.1 * half, middle + 1.1 * half])
    fig.update_yaxes(title_text="validation perplexity", secondary_y=True, tickformat=".4~g", **span)
    fig.update_yaxes(tickformat=".3~g", secondary_y=False)
    return fig
