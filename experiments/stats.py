"""The numbers a study reports from its runs: the mean and spread over seeds, each kind against its
control (experiments/runs.py's control()) with the standard error of the difference, and how many
steps a run takes to reach its control's final loss.
"""

import math
import statistics

from experiments.runs import control


def mean_std(values):
    """The mean and the sample standard deviation (n - 1) over seeds; one seed's is 0."""
    values = list(values)
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def lane_hours(runs):
    """A study's cost, one queue lane a run, from read_run(...)s: {runs, the hours at their median step
    times (steady), the hours by their wall clocks (wall: a stopped queue counts too)}."""
    runs = list(runs)
    return {"runs": len(runs), **{key: sum(r[f"{key}_s"] for r in runs) / 3600 for key in ("steady", "wall")}}


def lane_hours_line(hours):
    """lane_hours's sentence, as a study's report gives it."""
    return (f"The {hours['runs']} runs: {hours['steady']:.1f} lane-hours at their median step times ({hours['wall']:.1f} "
            "by their wall clocks, which also count the queue's pauses and restarts).")


def summarize(runs):
    """Per-kind statistics over seeds, each kind against its control (control()) and a variant
    against its input without it.

    runs: {kind: [read_run(...) per seed]}. Mean and sample standard deviation (n - 1) over
    seeds; `spread` is (max - min) / mean of the seeds' perplexities. A difference "exceeds seed
    variation" when the gap between mean val losses is more than twice its standard error,
    sqrt(s_a^2 / n_a + s_b^2 / n_b) (a rough 95% rule; with 3 seeds a t-test would need ~4.3x).
    """
    summary = {}
    for kind, rs in runs.items():
        (loss, loss_std), (ppl, ppl_std) = mean_std([r["val_loss"] for r in rs]), mean_std([r["val_ppl"] for r in rs])
        bpb, bpb_std = mean_std([r["val_bpb"] for r in rs])
        summary[kind] = {
            "seeds": len(rs), "val_loss": loss, "val_loss_std": loss_std, "val_ppl": ppl, "val_ppl_std": ppl_std,
            "val_bpb": bpb, "val_bpb_std": bpb_std,
            "spread": (max(r["val_ppl"] for r in rs) - min(r["val_ppl"] for r in rs)) / ppl,
            "trainable": rs[0]["trainable"], "input_params": rs[0]["input_params"], "tokens": rs[0]["tokens"],
            "wall_s": statistics.mean(r["wall_s"] for r in rs), "steady_s": statistics.mean(r["steady_s"] for r in rs),
            "skipped": [r["skipped"] for r in rs],  # per seed, the steps whose update was skipped
        }
        if all(r.get("norms") for r in rs):  # {part: [mean norm at the first evaluation, at the last]}, over seeds
            summary[kind]["norms"] = {part: [statistics.mean(r["norms"][i][1][part]["mean"] for r in rs) for i in (0, -1)]
                                      for part in rs[0]["norms"][0][1]}
        if all(r.get("code_quality") for r in rs):  # a code derived from a source: its quality, mean over seeds
            qualities = [r["code_quality"] for r in rs]
            summary[kind]["code_quality"] = {
                **qualities[0], **{key: statistics.mean(q[key] for q in qualities)
                                   for key in ("distinct", "min_hamming", "mean_hamming", "spearman")},
                "bit_balance": {"min": min(q["bit_balance"]["min"] for q in qualities),
                                "max": max(q["bit_balance"]["max"] for q in qualities)}}
        if all("probes" in r for r in rs):  # mean and std over seeds of each probe score
            probes = [r["probes"] for r in rs]
            for key in ("spelling_top1", "spelling_kl", "echo_rate", "echo_rate_sampled", "echo_rate_override",
                        "echo_rate_override_sampled"):
                if all(key in p for p in probes):  # the override: Kronecker runs only
                    summary[kind][key], summary[kind][f"{key}_std"] = mean_std([p[key] for p in probes])
            summary[kind]["layers"] = {c: [statistics.mean(p["layers"][c][i] for p in probes)
                                           for i in range(len(probes[0]["layers"][c]))] for c in probes[0]["layers"]}
            summary[kind]["spelling_by_category"] = {c: statistics.mean(p["spelling_by_category"][c] for p in probes)
                                                     for c in probes[0]["spelling_by_category"]}
    for kind, s in summary.items():
        if kind != control(kind) and control(kind) in summary:
            s["vs_learned"] = gap(s, summary[control(kind)])
            s["steps_to_learned"] = steps_to_learned(runs[kind], runs[control(kind)])
        base = kind.partition("+")[0]
        if base != kind and base != control(kind) and base in summary:  # a variant against its input without it
            s["vs_base"] = gap(s, summary[base])
    return summary


def steps_to(curve, target):
    """The first step at which a run's validation loss reaches target, interpolated linearly
    between the two evaluations around it (curve: [[step, val loss], ...]); None if it never does."""
    if curve[0][1] <= target:
        return curve[0][0]
    for (s0, l0), (s1, l1) in zip(curve, curve[1:]):
        if l1 <= target:  # l0 > target >= l1
            return s0 + (s1 - s0) * (l0 - target) / (l0 - l1)
    return None


def steps_to_learned(rs, learned):
    """How many steps each run of an input takes to reach the final val loss of the learned run
    of its seed (steps_to), and learned's steps over its (above 1: fewer than learned; the Kronecker
    paper reports 1.43x for its input): mean and std over the seeds that reach it."""
    steps, ratios = [], []
    for r, base in zip(rs, learned):
        mine, theirs = steps_to(r["curve"], base["val_loss"]), steps_to(base["curve"], base["val_loss"])
        if mine:
            steps.append(mine)
            ratios.append(theirs / mine)
    none = (None, None)  # no seed reached it
    (step, step_std), (ratio, ratio_std) = (mean_std(steps), mean_std(ratios)) if steps else (none, none)
    return {"reached": len(steps), "seeds": len(rs), "steps": step, "steps_std": step_std, "ratio": ratio,
            "ratio_std": ratio_std}


def paired(a, b):
    """The per-seed differences a_i - b_i (runs of one seed compared): their mean and standard error,
    std / sqrt(n) (0 for one seed)."""
    d = [x - y for x, y in zip(a, b)]
    mean, std = mean_std(d)
    return {"mean": mean, "stderr": std / math.sqrt(len(d)), "seeds": len(d)}


def difference(s, base, key):
    """s's mean of key minus base's, with the standard error of the difference of two means,
    sqrt(s_a^2 / n_a + s_b^2 / n_b); it exceeds seed variation when larger than 2 of them."""
    d = s[key] - base[key]
    stderr = math.sqrt(s[f"{key}_std"] ** 2 / s["seeds"] + base[f"{key}_std"] ** 2 / base["seeds"])
    return {"gap": d, "stderr": stderr, "exceeds_seed_variation": abs(d) > 2 * stderr}


def gap(s, base):
    """s's mean val loss (and bits per byte) minus base's (difference)."""
    loss, bpb = difference(s, base, "val_loss"), difference(s, base, "val_bpb")
    return {"loss_gap": loss["gap"], "ppl_ratio": s["val_ppl"] / base["val_ppl"] - 1, "stderr": loss["stderr"],
            "exceeds_seed_variation": loss["exceeds_seed_variation"], "bpb_gap": bpb["gap"], "bpb_stderr": bpb["stderr"]}


def bucket_rows(buckets):
    """[(train-count label, held-out targets, {arm: mean loss over seeds or None})], rarest first, from
    {arm: [one run's buckets (tools.evaluate's rare_tokens) per seed]}; None where a seed has no loss."""
    first = next(iter(buckets.values()))[0]
    rows = []
    for j, b in enumerate(first):
        losses = {arm: [runs[j]["loss"] for runs in seeds] for arm, seeds in buckets.items()}
        rows.append((b["train_count"], b["n"], {arm: statistics.mean(ls) if None not in ls else None
                                                for arm, ls in losses.items()}))
    return rows


def rare_gap(rows, arm, base, rare):
    """The arm's mean loss minus base's over the buckets (bucket_rows) of train counts under rare, weighted by
    their held-out targets; None when no target is rare."""
    picked = [(n, losses) for label, n, losses in rows
              if n and int(label.split("-")[0].lstrip(">=").replace(",", "")) < rare and losses[arm] is not None]
    total = sum(n for n, _ in picked)
    return sum(n * (losses[arm] - losses[base]) for n, losses in picked) / total if total else None
