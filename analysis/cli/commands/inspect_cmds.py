"""models, rank, noise: look at a model and its recurrent states."""
from __future__ import annotations

import sys

from analysis.cli.commands.checks import number_list, whole
from analysis.cli.commands.common import add_text_args, emit, load, text_batch
from analysis.cli.commands.progress import counted


def _setup_models(p):
    pass


def run_models(args) -> None:
    from analysis.models.samples import scan_samples  # not analysis.models.load: listing never imports torch
    samples, skipped = scan_samples()
    payload = {"samples": [s.__dict__ for s in samples],
               "skipped": [{"name": name, "reason": reason} for name, reason in skipped]}
    lines = [f"{s.name:24s} {s.model_type:22s} {s.description}" for s in samples] or ["(no bundled samples)"]
    for name, reason in skipped:
        print(f"warning: skipped sample_models/{name}: {reason}", file=sys.stderr)
    emit(args, payload, "\n".join(lines))


def run_rank(args) -> None:
    from analysis.inspect.report import every_token_report, rank_report
    from analysis.inspect.states import collect_states
    model, tokenizer, meta = load(args)
    ids, label = text_batch(args, tokenizer, model)
    with counted(args, "rank: states of each layer", "layer") as progress:
        trace = collect_states(model, ids, stride=args.stride, every_token=args.every_token,  # one forward pass
                               progress=progress)
    report = rank_report(trace, {**meta, "dataset": label, "stride": args.stride})
    if args.every_token:
        from analysis.linalg.spectral_tracker import DEFAULT_TOL
        report["every_token"] = every_token_report([layer.every_token for layer in trace.layers], DEFAULT_TOL)
    lines = [f"{meta['model']} on {meta['device']} ({meta['dtype']}), {label}: {ids.shape[0]}×{ids.shape[1]} tokens",
             "layer  head  rank_util  stable_rank  eff_rank  energy_rank"]
    for layer in report["layers"]:
        for h in layer["heads"]:
            lines.append(f"{layer['layer']:5d} {h['head']:5d} {_f(h['rank_utilization']):>10s} "
                         f"{_f(h['stable_rank']):>12s} {_f(h['effective_rank']):>9s} {_f(h['energy_rank']):>12s}")
    if args.every_token:
        mean = report["every_token"]["mean"]
        marks = sorted({0, len(mean) // 4, len(mean) // 2, len(mean) - 1})
        lines.append("rank utilization after every token (mean over layers, heads, sequences): "
                     + ", ".join(f"t={t}: {_f(mean[t])}" for t in marks))
    emit(args, report, "\n".join(lines))


def run_noise(args) -> None:
    from analysis.models import limits, load as models
    from analysis.archs import adapter_for
    from analysis.inspect.noise_report import noise_report
    from analysis.inspect.states import collect_states
    model, tokenizer, meta = load(args)
    info = models.describe(model)
    limits.check_noise_samples(args.samples, len(args.snr), max(info.head_k_dims), info.head_v_dim,
                               keys=min(args.keys, args.tokens), batch=args.batch)
    ids, label = text_batch(args, tokenizer, model)
    with counted(args, "noise: final states of each layer", "layer") as progress:
        trace = collect_states(model, ids, positions=[ids.shape[1] - 1], compute_metrics=False, keep_states=True,
                               keep_keys=args.keys, progress=progress)
    snrs = args.snr
    with counted(args, "noise: Monte Carlo of each layer", "layer") as progress:
        report = noise_report(trace, snrs, n_samples=args.samples, seed=args.seed, progress=progress,
                              qk_l2_normalised=adapter_for(model).qk_l2_normalised)
    report = {**meta, "dataset": label, "tokens": ids.shape[1], "batch": ids.shape[0], **report}
    emit(args, report, "\n".join(_noise_lines(report, meta, label, snrs)))


def _noise_lines(report: dict, meta: dict, label: str, snrs: list[float]) -> list[str]:
    """Median [q25–q75] over the batch; the top direction's Monte-Carlo RMS next to its second-order
    prediction, which is marked '(outside validity)' below the SNR where it holds."""
    at = f"{snrs[-1]:g} dB"
    normalised = report.get("query_l2_normalised", True)
    # the query the model reads: re-normalised MC vs its 2nd-order series, or raw MC vs the exact raw prediction
    mc_key, pred_key, pred_name = (("mc_rms", "second_order", "2nd-order prediction") if normalised else
                                   ("mc_raw_rms", "predicted_raw", "exact raw-query prediction"))
    lines = [f"{meta['model']} on {meta['device']} ({meta['dtype']}): query-noise amplification of the final states "
             f"({label}, {report['batch']} sequences; median [q25–q75] over sequences)",
             f"Monte Carlo query: {report['monte_carlo_query']}; figures that apply: {report['applicable_bounds']}",
             f"layer  head  rank  kappa [IQR]                       s1     ‖S‖_F²  rel.err@{at} top dir: "
             f"MC RMS [IQR] | {pred_name}"]
    notes = []
    for layer in report["layers"]:
        for h in layer["heads"]:
            ranks = [r for r in h["numerical_rank"] if r is not None]
            rank = f"{min(ranks):g}" if ranks and min(ranks) == max(ranks) else (
                f"{min(ranks):g}-{max(ranks):g}" if ranks else "nan")
            kappa = h["kappa"]
            kappa_text = f"{_f(kappa['median'][0])} [{_f(kappa['q25'][0])}–{_f(kappa['q75'][0])}]"
            line = (f"{layer['layer']:5d} {h['head']:5d} {rank:>5s}  {kappa_text:<26s} "
                    f"{_f(h['worst_case_gain']['median'][0]):>9s} {_f(h['noise_energy']['median'][0]):>10s}  ")
            if h["mc_singular"]:
                top = h["mc_singular"][0]
                mc = top[mc_key]
                valid = top["second_order_valid"][-1] if normalised else True   # the raw prediction is exact
                line += (f"{_f(mc['median'][-1])} [{_f(mc['q25'][-1])}–{_f(mc['q75'][-1])}] | "
                         f"{_f(top[pred_key]['median'][-1])}"
                         + ("" if valid else " (outside validity)"))
            else:
                line += "no direction within the numerical rank"
            lines.append(line)
            if h["directions_skipped"]:
                notes.append(f"layer {layer['layer']} head {h['head']}: {h['directions_skipped']}")
    lines += [f"note: {n}." for n in notes]
    lines.append(f"validity: {report['validity']}; prediction error vs Monte Carlo per SNR is in the JSON "
                 + ("(first_order_error_vs_mc, second_order_error_vs_mc)." if normalised else "(raw_error_vs_mc)."))
    return lines


def _f(x) -> str:
    return "nan" if x is None else f"{x:.4g}"


def _setup_rank(p):
    add_text_args(p)
    p.add_argument("--every-token", action="store_true",
                   help="also the rank utilization after every token of every layer, with s1 tracked instead "
                        "of an SVD per state (fast; 'every_token' in the JSON)")


def _setup_noise(p):
    add_text_args(p, batch=2)
    p.add_argument("--snr", type=number_list(-200, 200), default=[0.0, 10.0, 20.0, 30.0, 40.0], help="comma-separated SNRs in dB for the Monte Carlo")
    p.add_argument("--samples", type=whole(1), default=256, help="noise samples per key and SNR")
    p.add_argument("--keys", type=whole(1), default=8, help="real keys per head taken from the end of the trace")
    p.add_argument("--seed", type=whole(0), default=0)


COMMANDS = {
    "models": ("list the bundled sample models", _setup_models, run_models),
    "rank": ("spectral rank metrics of the recurrent states, per layer and head, and over token position",
             _setup_rank, run_rank),
    "noise": ("query-noise amplification of the final states: analytic bounds and Monte Carlo",
              _setup_noise, run_noise),
}
