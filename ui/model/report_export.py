"""The Model page's "Export report": the offline HTML report (analysis.runs.html_report) built by the core as a
background job, then offered as a download. The job holds the shared model's lock (state collection hooks it)."""
from __future__ import annotations

import json
import re

import streamlit as st

from analysis.runs import html_report
from analysis.io import writes
from analysis.runs.report_data import ReportSettings, generated_line, pruned_dirs
from analysis.runs.head_study import report_with_heads
from ui.shared import jobs, shrink
from ui.shared.context import Context

JOB = "report"
NONE = "(none)"


def settings_for(ctx: Context, pruned: str | None) -> ReportSettings:
    """The sidebar's text (split or pasted) and sizes; the report's own defaults for the rest."""
    spec = ctx.spec
    return ReportSettings(split=spec.split, text=spec.text if spec.kind == "text" else None, tokens=int(spec.tokens),
                          batch=int(spec.sequences), seed=int(spec.seed), pruned=pruned)


def file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name.rsplit("/", 1)[-1]).strip("._") + "-report.html"


def section(ctx: Context) -> None:
    st.subheader("Export report")
    st.caption("One HTML file that opens offline (plotly embedded, no network requests): this model's card, the "
               "layer × head rank grid, spectra, the query-noise table, importance agreement and, if you pick a "
               "pruned model, its plan and measured effect. Measured on the sidebar's text.")
    root = writes.output_root()
    options = [NONE] + [str(p) for p in pruned_dirs(root)]
    picked = st.selectbox(f"Pruned model to include (saved under {root})", options, key="report_pruned")
    settings = settings_for(ctx, None if picked == NONE else picked)
    key = json.dumps({"model": list(ctx.key), "settings": repr(settings)})
    if jobs.controls(JOB, key, "Export report", run_key="report_export"):
        _launch(ctx, settings, key)
    job = jobs.mine(JOB, key)
    if jobs.unsettled(job):
        jobs.follow_in_status(job, f"Building the report: {job.label}…")
    if job is not None and job.error:
        st.error(job.error)
    elif job is not None and job.state == "stopped":
        st.info("The report was stopped before it finished; press **Export report** to build it again.")
    elif job is not None and job.state == "done":
        st.download_button(f"Download the report (HTML, {len(job.result) / 2**20:.1f} MiB)", data=job.result,
                           file_name=file_name(ctx.name), mime="text/html", on_click="ignore", key="report_download")


def _launch(ctx: Context, settings: ReportSettings, key: str) -> None:
    """Shared objects resolved here in the script run; the thread gets plain objects."""
    use = shrink.using(ctx.key)

    def work(job):
        with use.lock:
            report = report_with_heads(use.model, use.tokenizer, settings, progress=job.report)
        job.report(1.0, "writing the HTML")
        return html_report.render(report, generated_line()).encode("utf-8")

    jobs.launch(JOB, key, f"report of {ctx.name}", work)
