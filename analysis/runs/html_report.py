"""One self-contained HTML file from the report's numbers (analysis.runs.report_data): opens offline.

plotly.js is embedded once, inline (no CDN, no MathJax, no fonts or images from anywhere); every piece of
text is escaped; the numbers behind every chart and table are also embedded as JSON (`#report-data`),
so a reader (or a test) can check them. Not `analysis.inspect.report`, which writes the CLI's JSON summaries.
"""
from __future__ import annotations

import html
import json
import math

from analysis.io.json_out import finite_json

GENERATOR = "state-rank report (python -m analysis report / the dashboard)"
STAMP = f'<meta name="generator" content="{GENERATOR}">'   # how analysis.io.report_file knows its own files
PLOT_CONFIG = {"displaylogo": False, "responsive": True}
LOG_AXIS = dict(type="log", exponentformat="e")
# plotly's own template, named on every figure: inside the dashboard Streamlit makes its theme the default, whose
# colours are placeholders its frontend swaps (near-black in a file) and whose axes do not make room for long labels
TEMPLATE = "plotly"
LAYER_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22")  # one per layer (cycled past ten), distinct in print and for common colour blindness


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def fmt(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:,}"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def table(header: list[str], rows: list[list], cls: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def label_line(report: dict, extra: str = "") -> str:
    """The settings every number below was measured with."""
    i = report["inputs"]
    text = (f"{report['model']['name']} · {i['dataset']} · {i['sequences']} sequences × {i['tokens']} tokens · "
            f"device {i['device']} · dtype {i['dtype']}")
    return f'<p class="label">{esc(text + (" · " + extra if extra else ""))}</p>'


def figure_html(fig, div_id: str, first: bool) -> str:
    import plotly.io as pio
    fig.update_layout(template=TEMPLATE)
    return pio.to_html(fig, include_plotlyjs=True if first else False, full_html=False, include_mathjax=False,
                       config=PLOT_CONFIG, div_id=div_id, default_height="420px", default_width="100%")


# ---- sections -------------------------------------------------------------------------------------------------

def card_section(report: dict) -> str:
    m = report["model"]
    rows = [("Architecture", m["label"]), ("Family", m.get("family") or "n/a"), ("Model type", m["model_type"]),
            ("Blocks (linear-attention + other)", f"{m['block_count']} ({m['linear_blocks']} linear attention)"),
            ("Linear-attention layers", m["layers"]), ("Heads (q/k)", m["heads"]), ("Value heads", m["value_heads"]),
            ("dk per head, by layer", ", ".join(str(d) for d in m["head_k_dims"])), ("dv per head", m["head_v_dim"]),
            ("Hidden size", m["hidden_size"]), ("Vocabulary", m["vocab_size"]), ("Parameters", f"{m['parameters']:,}"),
            ("fp32 state bytes per sequence", f"{m['state_bytes_per_sequence']:,}"),
            ("Device", m["device"]), ("dtype", m["dtype"]), ("Source", m["source"])]
    t = m.get("training")
    if t:
        rows += [("Training data", t["data"]),
                 ("Training run", f"{t['steps']:,} steps, {t['tokens_seen']:,} tokens seen, batch {t['batch']} × "
                                  f"{t['seq_len']} tokens, seed {t['seed']}")]
    else:
        rows.append(("Training data", "not recorded (no training.json from `python -m analysis train`)"))
    return ("<h2>Model card</h2>" + table(["Quantity", "Value"], [[k, fmt(v)] for k, v in rows], "card")
            + '<p class="label">Architecture read from the loaded modules.</p>')


def rank_grid(report: dict):
    """Effective rank of the final state, [layer][head] (None where a layer has fewer heads)."""
    layers = report["rank"]["layers"]
    n_heads = max(len(layer["heads"]) for layer in layers)
    z = [[None] * n_heads for _ in layers]
    for li, layer in enumerate(layers):
        for h in layer["heads"]:
            z[li][h["head"]] = h["effective_rank"]
    return z


def rank_section(report: dict, first: bool) -> str:
    import plotly.graph_objects as go
    z = rank_grid(report)
    text = [[fmt(v, 3) for v in row] for row in z]
    fig = go.Figure(go.Heatmap(z=z, x=list(range(len(z[0]))), y=list(range(len(z))), colorscale="Viridis",
                               text=text, texttemplate="%{text}", colorbar=dict(title="erank"),
                               hovertemplate="layer %{y}, head %{x}: effective rank %{z:.4g}<extra></extra>"))
    fig.update_layout(title="Effective rank of the final state, by layer and head",
                      xaxis=dict(title="head", dtick=1), yaxis=dict(title="layer", dtick=1, autorange="reversed"),
                      margin=dict(t=60))
    i = report["inputs"]
    return ("<h2>Rank of the recurrent states</h2>"
            "<p>Effective rank (Roy–Vetterli: exp of the entropy of the normalised singular values) of each head's "
            "state S ∈ ℝ^(dk×dv) after the last token, mean over the sequences: the dashboard's one count of the "
            "directions a state uses (its rank card lists the other counts beside it, each with its definition).</p>"
            + figure_html(fig, "rank-grid", first)
            + label_line(report, f"state after token {i['tokens'] - 1}"))


def spectra_section(report: dict) -> str:
    import plotly.graph_objects as go
    fig = go.Figure()
    for i, layer in enumerate(report["spectra"]):
        s = layer["singular_values"]
        colour = LAYER_COLOURS[i % len(LAYER_COLOURS)]
        fig.add_trace(go.Scatter(x=list(range(1, len(s) + 1)), y=[v if v and v > 0 else None for v in s],
                                 mode="lines+markers", name=f"layer {layer['layer']}", line=dict(color=colour),
                                 marker=dict(color=colour)))
    fig.update_layout(title="Singular values of the final state (mean over sequences and heads)",
                      xaxis=dict(title="index i"), yaxis=dict(title="singular value sᵢ", **LOG_AXIS), margin=dict(t=60))
    return ("<h2>Spectra</h2><p>Singular values s₁ ≥ s₂ ≥ … of each layer's final state, log scale; zeros are "
            "left out (a log axis cannot show them). Values below about 1e-7·s₁ are rounding of the float32 states, "
            "not structure.</p>" + figure_html(fig, "spectra", False) + label_line(report))


def _spread(d: dict, i: int) -> str:
    return f"{fmt(d['median'][i])} [{fmt(d['q25'][i])}–{fmt(d['q75'][i])}]"


def validity(ok: bool, start) -> str:
    """As the Query noise page words it."""
    return "yes" if ok else ("no: valid nowhere in range" if start is None else f"no: valid ≥ {start:.1f} dB")


def noise_rows(noise: dict) -> list[list]:
    rows = []
    for layer in noise["layers"]:
        for h in layer["heads"]:
            ranks = [r for r in h["numerical_rank"] if r is not None]
            rank = "n/a" if not ranks else (f"{min(ranks):g}" if min(ranks) == max(ranks)
                                            else f"{min(ranks):g}–{max(ranks):g}")
            base = [layer["layer"], h["head"], rank, _spread(h["kappa"], 0), fmt(h["worst_case_gain"]["median"][0]),
                    fmt(h["noise_energy"]["median"][0])]
            if not h["mc_singular"]:
                rows.append(base + ["—", "no direction within the numerical rank", "", "", ""])
                continue
            top = h["mc_singular"][0]
            for i, snr in enumerate(noise["snr_db"]):
                ok = top["second_order_valid"][i]
                pred = fmt(top["second_order"]["median"][i]) if ok else "outside validity"
                vs_mc = top.get("second_order_error_vs_mc")
                err = f"{vs_mc[i]:+.1%}" if ok and vs_mc and vs_mc[i] is not None else "—"
                rows.append(base + [f"{snr:g}", _spread(top["mc_rms"], i), pred,
                                    validity(ok, top["second_order_valid_from_snr_db"]), err])
    return rows


PREDICTION_VS_MC = ("prediction vs MC: for each sequence, the second-order prediction divided by the Monte Carlo "
                    "RMS error, minus 1, then the median over the sequences (+10 % = the prediction is 10 % high); "
                    "shown only where the prediction is valid.")


def noise_section(report: dict) -> str:
    noise = report["noise"]
    header = ["layer", "head", "numerical rank (τ = 1e-3)", "κ median [IQR]", "s₁ (median)", "‖S‖F² (median)",
              "SNR (dB)", "direction 1: Monte Carlo RMS [IQR]", "second-order prediction", "valid",
              "prediction vs MC"]
    notes = [f"Noise model: {noise['noise_model']}.", f"Monte Carlo: {noise['samples']} samples per key and SNR, "
             f"seed {noise['seed']}; {noise['aggregate']}.", f"Validity: {noise['validity']}.", PREDICTION_VS_MC]
    if not noise["query_l2_normalised"]:
        notes.append(f"Applicable bounds: {noise['applicable_bounds']}.")
    return ("<h2>Query noise</h2><p>How each head's final state amplifies noise in the query: closed-form figures "
            "and, for the top singular direction, the relative retrieval error (Monte Carlo) next to its "
            "second-order prediction, which is shown only where it is valid.</p>"
            + table(header, noise_rows(noise), "noise")
            + "".join(f'<p class="label">{esc(n)}</p>' for n in notes) + label_line(report, "final states"))


def importance_section(report: dict) -> str:
    imp = report["importance"]
    if imp is None:
        return ""
    if "error" in imp:
        return f"<h2>Importance agreement</h2><p class=\"note\">Not measured: {esc(imp['error'])}</p>"
    names = imp["strategies"]
    labels = [imp["labels"].get(n, n) for n in names]
    i = report["inputs"]
    calib = (f"calibration: {imp['calibration']} · kept sets at ratio ρ = {imp['ratio']:g} · dk kept "
             f"{imp['head_k_dims']} · device {i['device']} · dtype {i['dtype']}")
    if len(names) < 2:
        return (f"<h2>Importance agreement</h2><p class=\"note\">Fewer than two axis-aligned strategies "
                f"({esc(', '.join(labels) or 'none')}), so there is nothing to compare.</p>")
    import plotly.graph_objects as go
    z = imp["agreement"]
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=labels, zmin=0, zmax=1, colorscale="Blues",
                               text=[[fmt(v, 3) for v in row] for row in z], texttemplate="%{text}",
                               colorbar=dict(title="Jaccard"),
                               hovertemplate="%{y} vs %{x}: %{z:.3f}<extra></extra>"))
    fig.update_layout(title="Jaccard overlap of the kept channel sets (mean over layers and heads)",
                      xaxis=dict(automargin=True), yaxis=dict(autorange="reversed", automargin=True),
                      margin=dict(t=60))
    energy_rows = [[imp["labels"].get(n, n), layer, fmt(row["query"]), fmt(row["key"])]
                   for n in names for layer, row in enumerate(imp["kept_energy"][n])]
    return ("<h2>Importance agreement</h2><p>Which key channels each pruning strategy keeps, and how much the kept "
            "sets of two strategies overlap (|A∩B| / |A∪B|).</p>" + figure_html(fig, "agreement", False)
            + f'<p class="label">{esc(report["model"]["name"] + " · " + calib)}</p>'
            + "<h3>Energy of the kept activations</h3>"
            + table(["strategy", "layer", "kept query energy", "kept key energy"], energy_rows, "energy")
            + f'<p class="label">{esc(calib)} · post-conv activations entering the recurrence, mean over tokens '
              "and heads</p>")


def heads_section(report: dict) -> str:
    """The heads' low-/high-rank split on each input and its stability (analysis.runs.head_study)."""
    h = report.get("heads")
    if not h:
        return ""
    rows = []
    for layer in h["layers"]:
        kappa = "n/a" if layer["kappa"] is None else fmt(layer["kappa"], 3)
        for head in layer["heads"]:
            rows.append([layer["layer"], head["head"], head["key_head"], *[t["group"] for t in head["texts"]],
                         "yes" if head["same_on_all_texts"] else "no", f"{layer['agreement']:.0%}", kappa])
    header = ["layer", "value head", "key head", *[t.split(" (")[0] for t in h["texts"]], "same on all",
              "layer agreement", "layer agreement a (chance-corrected)"]
    return ("<h2>Head groups (state-rank stratification)</h2><p>Each layer's heads cut into a low-rank and a "
            f"high-rank group at the largest gap of {esc(h['summary'])}, on each input; the same group on every input "
            "means the group belongs to the head, not to the text.</p>" + table(header, rows, "heads")
            + "".join(f'<p class="label">{esc(line)}</p>' for line in h["notice"])
            + f'<p class="label">{esc(report["model"]["name"])} · inputs: {esc("; ".join(h["texts"]))} · '
              f'{h["sequences"]} × {h["tokens"]} tokens each · {esc(h["stability"])}</p>')


def _quality(entry: dict) -> list:
    if "perplexity" in entry:
        p = entry["perplexity"]
        return [entry["column"], fmt(p.get("perplexity")), fmt(p.get("bits_per_byte")), p.get("dataset", "n/a"),
                fmt(p.get("tokens")), fmt(p.get("context"))]
    r = entry["recall"]
    return [entry["column"], f"recall accuracy {fmt(r.get('accuracy'))}", "", "recall", "", ""]


TASK_HEADER = ["model", "task", "metric", "accuracy ± harness stderr", "docs", "few-shot", "data, split", "chance"]


def task_rows(column: str, tasks: dict) -> list[list]:
    """One table row per lm-evaluation-harness task of a measurement."""
    rows = []
    for name, t in tasks.items():
        value = fmt(t.get("accuracy")) + (f" ± {fmt(t['accuracy_stderr'], 2)}" if t.get("accuracy_stderr") is not None
                                           else "")
        rows.append([column, name, t.get("metric"), value, fmt(t.get("docs")), fmt(t.get("num_fewshot")),
                     f"{t.get('dataset')}, {t.get('split')}", fmt(t.get("chance"))])
    return rows


def downstream_section(report: dict) -> str:
    d = report.get("downstream")
    if not d:
        return ""
    return ("<h2>Downstream accuracy</h2>" + table(TASK_HEADER, task_rows(report["model"]["name"], d["tasks"]), "tasks")
            + label_line(report, f"{d['harness']}; accuracy ± the harness's standard error; chance: a guess's "
                                 "accuracy (about 0 for an open-vocabulary word)"))


def _task_table(entries: list[dict], harness: str | None, cls: str) -> str:
    rows = [r for e in entries if e.get("tasks") for r in task_rows(e["column"], e["tasks"])]
    if not rows:
        return ""
    return table(TASK_HEADER, rows, cls) + (f'<p class="label">{esc(harness)}; accuracy ± the harness\'s standard '
                                            "error</p>" if harness else "")


def measured_label(report: dict, measured: list[dict]) -> str:
    """What the measured table's numbers were scored on: its own tokens and context, not the states' inputs."""
    ppl = next((e["perplexity"] for e in measured if isinstance(e.get("perplexity"), dict)), None)
    if ppl is None:
        return label_line(report, "same tokens for both models")
    i = report["inputs"]
    text = (f"{report['model']['name']} · test perplexity of both models on the same {ppl['tokens']:,} tokens of "
            f"{ppl.get('dataset', 'n/a')}, context {ppl.get('context')}, stride {ppl.get('stride')} · device "
            f"{i['device']} · dtype {i['dtype']}")
    return f'<p class="label">{esc(text)}</p>'


def pruning_section(report: dict) -> str:
    p = report["pruning"]
    if p is None:
        return ""
    plan = p["plan"]
    rows = [["Strategy", plan.get("label") or plan.get("strategy")], ["Ratios", plan.get("ratios")],
            ["dk per layer", f"{plan.get('original_head_k_dims')} → {plan.get('head_k_dims')}"],
            ["Tiles per head", plan.get("tiles_per_head")], ["Readout", plan.get("readout") or plan.get("rescale")],
            ["Parameters", f"{p['parameters']['original']:,} → {p['parameters']['pruned']:,}"],
            ["Directory", p["directory"]]]
    header = ["model", "perplexity", "bits per byte", "dataset", "tokens", "context"]
    out = "<h2>Pruning plan and its effect</h2>" + table(["Plan", "Value"], [[k, fmt(v)] for k, v in rows], "plan")
    if p.get("measured"):
        out += ("<h3>Measured for this report</h3>" + table(header, [_quality(e) for e in p["measured"]], "measured")
                + measured_label(report, p["measured"]))
    if p.get("downstream"):
        down = [{"column": report["model"]["name"], "tasks": (report.get("downstream") or {}).get("tasks")},
                {"column": "pruned", "tasks": p["downstream"]["tasks"]}]
        out += "<h3>Downstream accuracy, measured for this report</h3>" + _task_table(down, p["downstream"]["harness"],
                                                                                      "measured-tasks")
    if p.get("measured_note"):
        out += f'<p class="note">{esc(p["measured_note"])}</p>'
    if p["recorded"]:
        out += ("<h3>Recorded when the model was pruned</h3>"
                + table(header, [_quality(e) for e in p["recorded"]], "recorded")
                + '<p class="label">as saved in pruning.json by the tool that pruned it</p>'
                + _task_table(p["recorded"], next((e.get("harness") for e in p["recorded"] if e.get("harness")), None),
                              "recorded-tasks"))
    return out


STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1100px;color:#222;padding:0 1rem}
h1{font-size:1.6rem}h2{margin-top:2.2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.85rem}th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left}
th{background:#f4f4f4}.label{color:#555;font-size:.8rem;margin:.2rem 0}.note{color:#8a5a00}
"""


def render(report: dict, generated: str) -> str:
    """The whole page. `generated`: when and by what it was made (shown in the header)."""
    m, i = report["model"], report["inputs"]
    data = json.dumps(finite_json(report), allow_nan=False, separators=(",", ":"))  # NaN becomes null
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")  # safe inside <script>
    warning = f'<p class="note">{esc(i["warning"])}</p>' if i.get("warning") else ""
    body = "".join([
        f"<h1>State-rank report: {esc(m['name'])}</h1>",
        f'<p class="label">{esc(generated)}. Inputs: {esc(i["dataset"])}, {i["sequences"]} sequences × '
        f'{i["tokens"]} tokens, states every {i["stride"]} tokens; device {esc(i["device"])}, dtype {esc(i["dtype"])}.'
        "</p>", warning,
        card_section(report), rank_section(report, first=True), spectra_section(report), noise_section(report),
        importance_section(report), heads_section(report), downstream_section(report), pruning_section(report)])
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">" + STAMP
            + f"<title>{esc('State-rank report: ' + m['name'])}</title><style>{STYLE}</style></head><body>"
            + body + f'<script type="application/json" id="report-data">{data}</script></body></html>\n')

