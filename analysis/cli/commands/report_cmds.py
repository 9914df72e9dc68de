"""report: one self-contained HTML file (opens offline) with the model card, ranks, spectra, query noise,
importance agreement and, given a pruned directory, the plan and its effect."""
from __future__ import annotations

from analysis.cli.commands.checks import number_list, real, whole
from analysis.cli.commands.common import add_yes_arg, load
from analysis.cli.commands.progress import bar, say, set_done


def _setup_report(p):
    from analysis.runs.report_data import ReportSettings as S
    p.add_argument("--out", required=True, metavar="FILE", help="the HTML file to write (new, or a report this tool "
                                                                "wrote before; nothing else is ever replaced)")
    p.add_argument("--text", metavar="FILE", help="UTF-8 text file to analyse (default: a bundled split)")
    p.add_argument("--split", default=S.split, help="bundled split when --text is not given")
    p.add_argument("--tokens", type=whole(1), default=S.tokens, help="tokens per sequence")
    p.add_argument("--batch", type=whole(1), default=S.batch, help="number of sequences (consecutive windows)")
    p.add_argument("--stride", type=whole(1), default=S.stride, help="collect states every K tokens (plus the last)")
    p.add_argument("--snr", type=number_list(-200, 200), default=list(S.snr_db),
                   help="comma-separated query SNRs in dB for the noise table")
    p.add_argument("--samples", type=whole(1), default=S.samples, help="Monte-Carlo noise samples per key and SNR")
    p.add_argument("--strategies", default=",".join(S.strategies),
                   help="pruning strategies whose kept sets are compared (empty: leave the section out)")
    p.add_argument("--ratio", type=real(0, 1, hi_open=True), default=S.ratio, help="ratio at which kept sets are compared")
    p.add_argument("--calib-sequences", type=whole(1), default=S.calib_sequences, help="calibration windows (train split)")
    p.add_argument("--calib-tokens", type=whole(1), default=S.calib_tokens, help="tokens per calibration window")
    p.add_argument("--seed", type=whole(0), default=S.seed)
    p.add_argument("--pruned", metavar="DIR", help="a pruned model directory of MODEL (from `prune` or the dashboard): "
                                                   "its plan, what was recorded, and test perplexity of both now")
    p.add_argument("--eval-tokens", type=whole(1), default=S.eval_tokens,
                   help="test tokens for the perplexity of the original and the pruned model")
    add_yes_arg(p)
    from analysis.cli.commands.eval_cmds import add_task_args
    add_task_args(p, prefix="task-")


def settings_from(args):
    from analysis.cli.commands.eval_cmds import task_settings
    from analysis.runs.report_data import ReportSettings
    return ReportSettings(text_file=args.text, split=args.split, tokens=args.tokens, batch=args.batch,
                          stride=args.stride, snr_db=tuple(args.snr), samples=args.samples,
                          seed=args.seed, strategies=tuple(s for s in args.strategies.split(",") if s.strip()),
                          ratio=args.ratio, calib_sequences=args.calib_sequences, calib_tokens=args.calib_tokens,
                          eval_tokens=args.eval_tokens, pruned=args.pruned, yes=args.yes, tasks=task_settings(args))


def run_report(args) -> None:
    from analysis.runs import html_report
    from analysis.io.report_file import check_destination, write_report
    from analysis.runs.report_data import generated_line
    from analysis.runs.head_study import report_with_heads
    from analysis.shrink.strategies import get_strategy
    check_destination(args.out, html_report.STAMP)  # before any work: never replaces what we did not write
    settings = settings_from(args)
    for name in settings.strategies:
        get_strategy(name)
    model, tokenizer, _ = load(args)
    with bar(args, "report", total=100, unit="%") as b:
        def progress(done: float, step: str) -> None:
            b.set_description(f"report: {step}", refresh=False)
            set_done(b, round(100 * done))
        report = report_with_heads(model, tokenizer, settings, progress=progress)
    page = html_report.render(report, generated_line())
    path = write_report(args.out, page, html_report.STAMP)
    from analysis.cli.commands.common import emit
    say(args, f"wrote {path} ({len(page.encode()) / 2**20:.1f} MiB, opens offline)")
    emit(args, report, f"{report['model']['name']} on {report['inputs']['device']} ({report['inputs']['dtype']}), "
                       f"{report['inputs']['dataset']}: {report['inputs']['sequences']}×{report['inputs']['tokens']} "
                       "tokens")


COMMANDS = {"report": ("one self-contained HTML report (opens offline): model card, rank grid, spectra, query "
                       "noise, importance agreement, head groups, pruning plan and effect", _setup_report, run_report)}
