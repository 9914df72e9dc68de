"""The Prune page's room (pages/prune.py), in two halves that share one set of inputs.

Choosing a plan (how many key channels each layer keeps, and the evidence for it):
  plan_inputs         the per-layer ratio inputs, remembered per model; every button below fills them
  ratios              those inputs beside each layer's rank utilization, with Suggest from rank and Allocate
  sensitivity_view    the layer-sensitivity map (a job: live, stop/resume), the allocator, the evidence table
  sensitivity_figure  the map's heatmap (pure)
  plan_view           the typed plan's predicted loss ± σ beside the allocator's, uniform and rank-suggested plans
  verify_view         Verify and choose: those plans measured on choice tokens, the answer on held-out ones (a job)
  plan_history        every plan measured this session and every saved model on Δ quality vs state bytes; a
                      click puts a point's plan back into the inputs
  plan_figure         the history's chart (pure)

Doing the prune (the plan in the inputs, applied, recovered and saved):
  prune_form          the form: strategy, uniform or per-layer ratios, rounding, readout scale, evaluation
                      settings, and the plan table
  prune_run           the prune and recovery jobs, and the before/after comparison
  recovery_view       the recovery's loss curve (pure)
  prune_save          Save / Download of the model the user picked
  save_guard          Save with Overwrite replaces only what the page showed

One room, not ui/plan/ + ui/prune/ (issue 43 item 3 asked): the halves meet in both directions on one page. The
form draws the plan inputs that Suggest, Allocate, Verify and a history click fill, and each finished prune and
recovery is a point of the plan history; a room imports only ui.shared and itself (tests/project/test_layout.py),
so two rooms would need those seams (plan_inputs, the Allocate button among the ratio inputs, the history's
record_prune/record_recovery) moved into ui.shared or the page, for a page that stays one page.
"""
