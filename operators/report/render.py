"""report.html from a run's records (collect.py): one self-contained page, images as data: URIs, inline CSS, no
script and nothing fetched, so it opens the same from a disk, an S3 download or MLflow's artifact viewer."""

from __future__ import annotations

import base64
import datetime as dt
import json
import shlex
from html import escape
from itertools import groupby
from typing import Any

from bert_core.pretrain.learning_watch import CHANCE_MARGIN
from operators.report import TASK_ID, plots

SECTIONS = {"models": "Models: the registry's decisions", "data": "Data: what the model trained on",
            "pretraining": "Pretraining",
            "finetuning": "Fine-tuning", "timeline": "Task timeline", "serving": "Serving the promoted models"}
# A nightly regression's run (its report/results.json) shows these instead: it trains and registers nothing.
NIGHTLY_SECTIONS = {"nightly": "Nightly regression: the verdict", "timeline": SECTIONS["timeline"]}
TITLES = {**SECTIONS, **NIGHTLY_SECTIONS}
# What "chance" is for each pretraining accuracy (the learning watch's baselines).
CHANCE_WORDS = {"mlm_accuracy": ("masked-LM accuracy", "always predicting the most frequent masked token"),
                "nsp_accuracy": ("next-sentence accuracy", "always answering the majority label")}
FIRST_SERVING_PORT = 5001

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1160px;
       padding: 0 24px 48px; color: #1d232b; line-height: 1.45; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { border-bottom: 2px solid #dde3ea; padding-bottom: 4px;
margin-top: 2em; } h3 { margin-bottom: 0.3em; }
.meta { color: #55606e; font-size: 0.92em; } nav a { margin-right: 1.2em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.92em; }
th, td { border: 1px solid #d5dbe2; padding: 3px 9px; text-align: left; vertical-align: top; }
th { background: #f2f5f8; } td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.badge { display: inline-block; border-radius: 4px; padding: 1px 8px; font-size: 0.8em; font-weight: 600;
         color: #fff; vertical-align: middle; }
.good { background: #2a7f3f; } .bad { background: #c0392b; } .neutral { background: #6b7785; }
.ok { color: #2a7f3f; } .fail { color: #c0392b; font-weight: 600; }
.note { background: #fff7e0; border-left: 4px solid #e0a800; padding: 6px 10px; margin: 0.6em 0; }
.note.failed { background: #fdecea; border-left-color: #c0392b; }
.card { border: 1px solid #dde3ea; border-radius: 6px; padding: 4px 16px 8px; margin: 12px 0; }
img { max-width: 100%; height: auto; border: 1px solid #eef1f4; }
details { margin: 0.4em 0 1em; } summary { cursor: pointer; color: #2c5d8f; }
pre { background: #f5f7f9; border: 1px solid #dde3ea; padding: 8px 12px; white-space: pre-wrap; font-size: 0.85em; }
"""


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _num(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _e("—" if value is None else value)
    return f"{value:.4g}"


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{_e(alt)}">'


def _table(header: list[str], rows: list[list[str]]) -> str:
    """Cells are HTML already (escaped by the caller)."""
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(rows_cell for rows_cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _td(value: Any, numeric: bool = False, css: str = "") -> str:
    classes = " ".join(c for c in ("num" if numeric else "", css) if c)
    text = _num(value) if numeric else _e(value)
    return f'<td class="{classes}">{text}</td>' if classes else f"<td>{text}</td>"


def render(records: dict[str, Any]) -> str:
    title = f"{records.get('dag_id') or 'run'} {records.get('dag_run_id') or records['run_dir']}"
    if records.get("nightly"):
        # A night trains and registers nothing: its verdict and the timeline, not five sections saying "none".
        shown = {"nightly": _nightly(records), "timeline": _timeline(records)}
    else:
        shown = {"models": _models(records), "data": _data(records), "pretraining": _pretraining(records),
                 "finetuning": _finetuning(records), "timeline": _timeline(records), "serving": _serving(records)}
    nav = "".join(f'<a href="#{key}">{_e(TITLES[key])}</a>' for key in shown)
    body = [f"<header><h1>{_e(title)}</h1>{_overview(records)}</header>", f"<nav>{nav}</nav>",
            *(_section(key, content) for key, content in shown.items())]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            # An empty icon: a browser asks for /favicon.ico otherwise, an error on a file:// page.
            f"<link rel=\"icon\" href=\"data:,\"><title>{_e(title)}</title><style>{STYLE}</style></head>\n"
            "<body>\n" + "\n".join(body) + "\n</body></html>\n")


def _section(key: str, content: str) -> str:
    return f'<section id="{key}"><h2>{_e(TITLES[key])}</h2>\n{content}\n</section>'


def _overview(records: dict[str, Any]) -> str:
    decisions, tasks = records["registry"], records["tasks"]
    promoted = sum(1 for d in decisions if d["promoted"])
    failed = [t for t in tasks if t["state"] != "success"]
    nightly = records.get("nightly")
    if nightly:
        parts = [f"nightly regression {nightly['status']}: {len(nightly['versions'])} model version(s) scored, "
                 f"{sum(1 for f in nightly['findings'] if f.get('regressed'))} regression(s)"]
    else:
        parts = [f"{len(decisions)} model(s) registered: {promoted} promoted, {len(decisions) - promoted} "
                 "not promoted"]
    if tasks:
        parts.append(f"{len(tasks) - len(failed)} task tr{'y' if len(tasks) == 1 else 'ies'} succeeded, "
                     f"{len(failed)} failed")
        parts.append(f"wall time {_duration(_wall_seconds(tasks))}")
    lines = ["; ".join(parts) + "."]
    lines.append(f"Run directory: <code>{_e(records['run_dir'])}</code>")
    lines.append(f"MLflow: <code>{_e(records['tracking_uri'])}</code>; report built "
                 f"{_e(records.get('collected_at', ''))}")
    return "".join(f'<p class="meta">{line}</p>' for line in lines) + _failure(tasks)


def failed_for_good(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tasks whose last recorded try did not succeed: why the run failed (a try retried with success is not;
    nor the report task of an earlier build, a teardown left out of the run's outcome)."""
    last: dict[tuple, dict[str, Any]] = {}
    for t in tasks:
        if t.get("task_id") == TASK_ID:
            continue
        key = (t.get("task_id"), t.get("map_index", -1))
        if key not in last or (t.get("try_number") or 0) >= (last[key].get("try_number") or 0):
            last[key] = t
    return [t for t in last.values() if t.get("state") != "success"]


def _failure(tasks: list[dict[str, Any]]) -> str:
    """A failed run says so first, naming each task that failed and its error: the sections below are empty or
    partial because of it (the tasks after it never ran)."""
    failed = failed_for_good(tasks)
    if not failed:
        return ""
    items = "".join(f"<li>{_e(plots.task_label(t))}: {_e(t.get('error') or t.get('state'))}</li>" for t in failed)
    if len(failed) == 1:
        return (f'<div class="note failed"><b>This run failed: {_e(plots.task_label(failed[0]))}: '
                f"{_e(failed[0].get('error') or failed[0].get('state'))}</b>. The tasks after it did not run; "
                "what they would have made is missing below.</div>")
    return (f'<div class="note failed"><b>This run failed</b>: {len(failed)} tasks failed. The tasks after them '
            f"did not run; what they would have made is missing below.<ul>{items}</ul></div>")


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def _wall_seconds(tasks: list[dict[str, Any]]) -> float:
    starts = [dt.datetime.fromisoformat(t["started_at"]) for t in tasks]
    ends = [dt.datetime.fromisoformat(t["finished_at"]) for t in tasks]
    return (max(ends) - min(starts)).total_seconds()


# ---------------------------------------------------------------------------------------------- models


def chance_notes(metrics: dict[str, float]) -> list[str]:
    """In words, each pretraining accuracy that is at chance (within the learning watch's margin)."""
    notes = []
    for metric, (name, baseline) in CHANCE_WORDS.items():
        value, chance = metrics.get(metric), metrics.get(f"{metric}_chance")
        if value is not None and chance is not None and value <= chance + CHANCE_MARGIN:
            notes.append(f"{name[:1].upper() + name[1:]} is at chance: {value:.3f}, where {baseline} scores "
                         f"{chance:.3f}; this part of the model did not learn.")
    return notes


def _version(value: Any) -> str:
    return f"v{value}" if value not in (None, "") else "none"


def gate_rows(decision: dict[str, Any]) -> list[list[str]]:
    """One row per gate or floor metric: the candidate's value, the champion's, the floor, and whether it passed
    (by operators.registry.decide, the rule promotion itself applied)."""
    from operators.registry import decide

    candidate, champion = decision.get("candidate_metrics") or {}, decision.get("champion_metrics")
    gates, floors = list(decision.get("gates") or []), dict(decision.get("floors") or {})
    chance = dict(decision.get("chance") or {})
    rows = []
    for metric in dict.fromkeys([*gates, *floors]):
        compared = champion if metric in gates and champion and decision.get("champion_before") != decision.get(
            "candidate") else None
        ok, reasons = decide({metric: candidate[metric]} if metric in candidate else {},
                             {metric: compared[metric]} if compared and metric in compared else None,
                             (metric,) if metric in gates else (),
                             {metric: floors[metric]} if metric in floors else {},
                             {metric: chance[metric]} if metric in chance else None)
        role = "gate and floor" if metric in gates and metric in floors else ("gate" if metric in gates else "floor")
        verdict = (_td("passes", css="ok") if ok else _td("; ".join(r.split(": ", 1)[-1] for r in reasons),
                                                           css="fail"))
        rows.append([_td(metric), _td(role), _td(candidate.get(metric), True),
                     _td(compared.get(metric) if compared else None, True), _td(floors.get(metric), True), verdict])
    return rows


def _models(records: dict[str, Any]) -> str:
    decisions = records["registry"]
    if not decisions:
        return "<p>This run registered no model (no registry/&lt;name&gt;-v&lt;N&gt;.json).</p>"
    cards = []
    for d in decisions:
        badge = ('<span class="badge good">promoted to champion</span>' if d["promoted"]
                 else '<span class="badge bad">not promoted</span>')
        champion = (f"champion before: <b>{_version(d.get('champion_before'))}</b> &rarr; after: "
                    f"<b>{_version(d.get('champion_after'))}</b>; previous: {_version(d.get('previous_after'))}")
        reasons = "".join(f"<li>{_e(r)}</li>" for r in d.get("reasons") or [])
        table = _table(["metric", "role", "candidate", "champion", "floor", "verdict"], gate_rows(d))
        metrics = ", ".join(f"{_e(k)} {_num(v)}" for k, v in sorted((d.get("candidate_metrics") or {}).items()))
        notes = "".join(f'<p class="note">{_e(n)}</p>' for n in chance_notes(d.get("candidate_metrics") or {}))
        served = d.get("serving_check")
        if served:
            check = (f"served artifact answered its {served.get('examples', 0)} check example(s) as they were scored"
                     if not served.get("problems") else "served artifact check failed: "
                     + "; ".join(served["problems"]))
            notes += f'<p class="meta">{_e(check)}</p>'
        cards.append(f'<div class="card"><h3>{_e(d["name"])} {_e(_version(d["candidate"]))} {badge}</h3>'
                     f"<p>{champion}</p><p>Why:</p><ul>{reasons}</ul>{table}{notes}"
                     f'<p class="meta">All metrics: {metrics}</p></div>')
    return "\n".join(cards)


# ---------------------------------------------------------------------------------------------- data


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else _num(value)


def _bytes(value: Any) -> str:
    if not isinstance(value, int):
        return "—"
    size = float(value)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{value:,} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return str(value)


def _settings(value: Any) -> str:
    """A shard setting the phase's shards share, or the values they differ by."""
    return " / ".join(map(str, value)) if isinstance(value, list) else _count(value)


def _phase_name(phase: str) -> str:
    return phase or "one phase"


def _sides(data: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    sets = data.get("shard_sets") or []
    return [s for s in sets if s.get("side") != "heldout"], [s for s in sets if s.get("side") == "heldout"]


def _total(sets: list[dict[str, Any]], key: str) -> int | None:
    values = [s.get(key) for s in sets]
    return sum(values) if values and all(isinstance(v, int) for v in values) else None


def _validated(sets: list[dict[str, Any]]) -> str:
    """validate-shards over some shard directories, in words."""
    results = [s["validation"] for s in sets if s.get("validation")]
    if not results:
        return "not validated"
    failed = sum(1 for v in results if not v["success"])
    unchecked = len(sets) - len(results)
    text = (("passed" if len(results) == 1 else "passed in both directories" if len(results) == 2 else
             f"passed in all {len(results)} directories") if not failed else
            f"FAILED in {failed} of {len(results)} director{'y' if len(results) == 1 else 'ies'}")
    return text + (f" ({unchecked} not validated)" if unchecked else "")


def _checked(sets: list[dict[str, Any]]) -> str:
    verdict = _validated(sets)
    return verdict if verdict == "not validated" else f"validate-shards {verdict}"


def data_lines(records: dict[str, Any]) -> list[str]:
    """What the run trained on, in a few plain lines (the report's MLflow description and the text summary)."""
    data = records.get("data") or {}
    if not data:
        return []
    lines = []
    text = data.get("text") or []
    if text:
        lines.append(f"text: {_count(sum(t.get('documents') or 0 for t in text))} documents, "
                     f"{_count(sum(t.get('sentences') or 0 for t in text))} sentences from "
                     f"{_count(sum(t.get('files') or 0 for t in text))} input file(s)")
    phases = data.get("phases") or []
    for phase in phases:
        held = (f"{_count(phase.get('heldout_instances'))} held-out instances ({_count(phase.get('heldout_documents'))} "
                "documents)" if phase.get("heldout") else "no held-out shards")
        lines.append(f"pretraining{' ' + phase['phase'] if phase['phase'] else ''}: "
                     f"{_count(phase.get('instances'))} training instances ({_count(phase.get('documents'))} "
                     f"documents), {held}; sequence length {_settings(phase.get('max_seq_length'))}, max predictions "
                     f"{_settings(phase.get('max_predictions_per_seq'))}, batch {_count(phase.get('batch_size'))} x "
                     f"accumulate {_count(phase.get('accumulate'))}, {_count(phase.get('steps'))} steps")
    train, heldout = _sides(data)
    for side, group in (("training", train), ("held-out", heldout)):
        if group:
            facts = [f"{_count(_total(group, 'shards'))} shard file(s) in {len(group)} director"
                     f"{'y' if len(group) == 1 else 'ies'}, {_bytes(_total(group, 'bytes'))}"]
            if not phases:  # else each phase's line says what it read
                facts.insert(0, f"{_count(_total(group, 'instances'))} instances from "
                                f"{_count(_total(group, 'documents'))} documents")
            lines.append(f"{side} shards: {', '.join(facts)}; {_checked(group)}")
    return lines


def _passes(phase: dict[str, Any]) -> Any:
    """Sequences trained on over the training instances: how many times the run went through its shards."""
    steps, batch, instances = phase.get("steps"), phase.get("batch_size"), phase.get("instances")
    if phase.get("use_avg_len") or not all(isinstance(v, int) and v > 0 for v in (steps, batch, instances)):
        return None
    return steps * batch * (phase.get("accumulate") or 1) / instances


def _data(records: dict[str, Any]) -> str:
    data = records.get("data") or {}
    if not data:
        return ("<p>This run made no pretraining data (no segment or make-shards output in its directory).</p>")
    out = []
    text, (train, heldout) = data.get("text") or [], _sides(data)
    if text:
        documents = sum(t.get("documents") or 0 for t in text)
        splitter = text[0].get("sentence_splitter") or {}
        how = (f", split into sentences by {splitter.get('splitter')}"
               + (" (trained on this text)" if splitter.get("model") == "trained-on-input" else
                  f" ({splitter['model']})" if splitter.get("model") else "") if splitter.get("splitter") else "")
        dropped = sum(t.get("dropped_empty_documents") or 0 for t in text)
        sentence = (f"<b>{_count(documents)} documents</b> ({_count(sum(t.get('sentences') or 0 for t in text))} "
                    f"sentences) from {_count(sum(t.get('files') or 0 for t in text))} input file(s){_e(how)}")
        if dropped:
            sentence += f"; {_count(dropped)} empty document(s) dropped"
        # The split of the documents: each phase's (the same documents, made into shards of its settings), said
        # once when the phases agree; the shard directories' without a phase.
        splits = {(p.get("documents"), p.get("heldout_documents")) for p in data.get("phases") or [] if p.get("heldout")}
        train_docs, held_docs = (next(iter(splits)) if len(splits) == 1 else (None, None) if splits else
                                 (_total(train, "documents"), _total(heldout, "documents")))
        if heldout and train_docs is not None and held_docs is not None:
            sentence += (f": <b>{_count(train_docs)}</b> for training, <b>{_count(held_docs)}</b> "
                         f"({100 * held_docs / max(train_docs + held_docs, 1):.1f}%) held out for evaluation")
        out.append(f"<p>{sentence}.</p>")
    phases = data.get("phases") or []
    if phases:
        rows = [[_td(_phase_name(p["phase"])), _td(_settings(p.get("max_seq_length")), True),
                 _td(_settings(p.get("max_predictions_per_seq")), True),
                 _td(f"{_count(p.get('batch_size'))} x {_count(p.get('accumulate'))}"
                     + (" tokens" if p.get("use_avg_len") else ""), True),
                 _td(_count(p.get("steps")), True),
                 _td(f"{_count(p.get('instances'))} ({_count(p.get('documents'))} documents)", True),
                 _td(_passes(p), True),
                 _td(f"{_count(p.get('heldout_instances'))} ({_count(p.get('heldout_documents'))} documents)"
                     if p.get("heldout") else "none: scored on the training data", True)]
                for p in phases]
        out.append(_table(["phase", "sequence length", "max predictions per sequence", "batch x accumulate", "steps",
                           "training instances (documents)", "epochs (passes over them)",
                           "held-out instances (documents)"],
                          rows))
    elif train or heldout:
        out.append('<p class="note">No pretraining phase recorded its inputs (the run did not pretrain): the shards '
                   "below were made, nothing trained on them.</p>")
    sets = train + heldout
    if sets:
        rows = []
        for side, group in (("training", train), ("held-out", heldout)):
            for s in group:
                check = s.get("validation")
                verdict = (_td("no shard: none of its documents is on this side", css="ok")
                           if s.get("empty_side") and (check is None or check["success"]) else
                           _td("not validated") if check is None else
                           _td(f"passed ({check['checks']} checks)", css="ok") if check["success"] else
                           _td(f"failed: {len(check['failed'])} of {check['checks']} checks", css="fail"))
                phases = s.get("phases") or []
                used = "no" if not phases else "yes" if phases == [""] else ", ".join(map(_phase_name, phases))
                rows.append([_td(s["dir"] or "."), _td(side), _td(used), _td(_count(s.get("shards")), True),
                             _td(_bytes(s.get("bytes")), True), _td(_count(s.get("documents")), True),
                             _td(_count(s.get("tokens")), True), _td(_count(s.get("instances")), True),
                             _td(_count(s.get("masked")), True), verdict])
            if len(group) > 1:
                rows.append([_td(f"all {side}"), _td(""), _td(""),
                             *(_td(_bytes(_total(group, key)) if key == "bytes" else _count(_total(group, key)), True)
                               for key in ("shards", "bytes", "documents", "tokens", "instances", "masked")),
                             _td(_validated(group))])
        out.append("<p>The shards (make-shards' manifests; text tokens are the documents' WordPiece tokens, "
                   "instances the masked sequences made from them):</p>")
        out.append(_table(["directory", "side", "trained", "shard files", "size", "documents", "text tokens",
                           "instances", "masked tokens", "validate-shards"], rows))
        out.append(_shard_settings(sets))
        out.append(_validation(sets))
    return "\n".join(out)


def _setting(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value) if isinstance(value, int) else _num(value)


def _shard_settings(sets: list[dict[str, Any]]) -> str:
    """The make-shards settings, once where the directories share them (the held-out side's one masking pass
    apart)."""
    facts = []
    for key, label in (("masked_lm_prob", "masked-LM probability"), ("short_seq_prob", "short-sequence probability"),
                       ("dupe_factor", "masked copies of each document (dupe factor)"),
                       ("whole_word_mask", "whole-word masking"), ("do_lower_case", "lower-cased"),
                       ("holdout_fraction", "held-out fraction"), ("random_seed", "seed")):
        by_side: dict[str, list[Any]] = {}
        for s in sets:
            if key in (s.get("config") or {}):
                side = "held-out" if s.get("side") == "heldout" else "training"
                values = by_side.setdefault(side, [])
                if s["config"][key] not in values:
                    values.append(s["config"][key])
        if not by_side:
            continue
        distinct = {json.dumps(v) for values in by_side.values() for v in values}
        if len(distinct) == 1:
            facts.append(f"{label} {_setting(next(iter(by_side.values()))[0])}")
        else:
            facts.append(f"{label} " + ", ".join(f"{' / '.join(map(_setting, values))} ({side})"
                                                 for side, values in by_side.items()))
    vocab = next((s["vocab"] for s in sets if (s.get("vocab") or {}).get("uri")), None)
    if vocab:
        facts.append(f"vocab {vocab['uri']} ({_count(vocab.get('size'))} ids)")
    return f'<p class="meta">make-shards settings: {_e("; ".join(facts))}.</p>' if facts else ""


def _validation(sets: list[dict[str, Any]]) -> str:
    """validate-shards: passed or failed, what failed, what it measured, and (folded) every check it ran."""
    results = [(s, s["validation"]) for s in sets if s.get("validation")]
    unchecked = [s["dir"] or "." for s in sets if not s.get("validation")]
    if not results:
        return '<p class="note">validate-shards did not run on these shards (no validation.json).</p>'
    failed = [(s, v) for s, v in results if not v["success"]]
    head = ("validate-shards: <b class=\"ok\">passed</b> in "
            + ("the directory" if len(results) == 1 else "both directories" if len(results) == 2 else
               f"all {len(results)} directories") + " it validated" if not failed else
            f"validate-shards: <b class=\"fail\">failed</b> in {len(failed)} of the {len(results)} "
            f"director{'y' if len(results) == 1 else 'ies'} it validated")
    if unchecked:
        head += f"; it did not run on {_e(', '.join(unchecked))}"
    totals = {key: sum(v["statistics"].get(key) or 0 for _, v in results)
              for key in ("tokens", "predictions", "shown_mask", "shown_original", "random_next", "instances")}
    measured = ""
    if totals["tokens"] and totals["predictions"] and totals["instances"]:
        measured = (f" Over the validated shards, {totals['predictions'] / totals['tokens']:.3f} of the tokens "
                    f"are predicted, {totals['shown_mask'] / totals['predictions']:.3f} of the predictions show "
                    f"[MASK] and {totals['shown_original'] / totals['predictions']:.3f} the original token, and "
                    f"{totals['random_next'] / totals['instances']:.3f} of the instances have a random next sentence.")
    parts = [f"<p>{head}.{_e(measured)}</p>"]
    for s, v in failed:
        parts.append(f'<p class="fail">{_e(s["dir"] or ".")}:</p><ul>'
                     + "".join(f"<li>{_e(message)}</li>" for message in v["failed"]) + "</ul>")
    suites = max((v.get("suites") or {} for _, v in results), key=lambda found: sum(map(len, found.values())))
    if suites:
        count = sum(len(checks) for checks in suites.values())
        listed = "".join(f"<li><b>{_e(suite)}</b> ({len(checks)}): {_e('; '.join(checks))}</li>"
                         for suite, checks in suites.items())
        parts.append(f"<details><summary>What it checked: {count} checks in {len(suites)} suites "
                     f"({_e(', '.join(suites))})</summary><ul>{listed}</ul></details>")
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------- pretraining


def _pretraining(records: dict[str, Any]) -> str:
    phases = records["pretraining"]
    if not phases:
        return "<p>This run did not pretrain.</p>"
    out = []
    for phase in phases:
        name = f"phase {phase['phase']}" if phase["phase"] else "the model"
        parts = [f"<h3>{_e(name.capitalize())}</h3>"] if len(phases) > 1 or phase["phase"] else []
        if phase["history"]:
            parts.append(_img(plots.pretraining(phase), f"pretraining curves of {name}"))
        else:
            parts.append(f'<p class="note">No curves: {_e(phase["history_note"] or "no metric history")}.</p>')
        parts.append(f"<p>{_e(_training_facts(phase))}</p>")
        rows = []
        for metric, (label, baseline) in CHANCE_WORDS.items():
            value, level = phase["metrics"].get(metric), plots.chance(phase, metric)
            if value is None:
                continue
            at_chance = level is not None and value <= level + CHANCE_MARGIN
            verdict = ("at chance: did not learn" if at_chance else
                       f"{(value - level) * 100:+.1f} points above chance" if level is not None else "")
            rows.append([_td(label), _td(value, True), _td(level, True), _td(baseline),
                         _td(verdict, css="fail" if at_chance else "ok")])
        for metric in ("loss", "mlm_loss", "nsp_loss"):
            if metric in phase["metrics"]:
                rows.append([_td(metric), _td(phase["metrics"][metric], True), _td(None, True), _td(""), _td("")])
        on = {"data_eval": "held-out documents", "training data": "the training data"}.get(phase.get("metrics_on"),
                                                                                              phase.get("metrics_on"))
        parts.append(f"<p>Final figures, measured on {_e(on or 'unrecorded data')}:</p>")
        parts.append(_table(["metric", "value", "chance", "chance is", "verdict"], rows))
        check = phase.get("learning_check") or {}
        if check:
            problems = "".join(f"<li>{_e(p)}</li>" for p in check.get("problems") or [])
            parts.append(f"<p>Learning check: <b>{_e(check.get('status', 'unknown'))}</b> (checked at steps "
                         f"{_e(', '.join(str(s) for s in check.get('checked_at') or []))})</p>"
                         + (f"<ul>{problems}</ul>" if problems else ""))
        out.append("\n".join(parts))
    return "\n".join(out)


def _training_facts(phase: dict[str, Any]) -> str:
    config, recipe = phase.get("config") or {}, phase.get("recipe") or {}
    start = config.get("model") or f"the weights of {config.get('pretrained')}"
    facts = [f"{phase.get('steps')} steps of {start}"]
    if phase.get("world_size"):
        facts.append(f"on {phase['world_size']} worker(s)")
    if phase.get("tokens"):
        facts.append(f"{phase['tokens']:,} tokens")
    if recipe:
        chosen = set(recipe.get("chosen_by_rule") or [])
        facts.append(f"optimizer {recipe.get('optimizer')}, peak lr {_num(recipe.get('lr'))}, warmup "
                     f"{_num(recipe.get('warmup_ratio'))}" + (" (chosen by the recipe's rule: "
                                                              f"{', '.join(sorted(chosen))})" if chosen else ""))
    if config.get("batch_size"):
        # The precision the run computed in (the manifest's choice), not the flag: `auto` is the default.
        chosen = phase.get("precision") or {}
        precision = (f"{chosen['dtype']} (dtype {chosen.get('requested', config.get('dtype'))}: {chosen['reason']})"
                     if chosen.get("dtype") else config.get("dtype", "float32"))
        facts.append(f"batch {config['batch_size']} x accumulate {config.get('accumulate', 1)}, {precision}")
    if phase.get("resumed_from"):
        facts.append(f"resumed from {phase['resumed_from']}")
    return "; ".join(facts) + "."


# ---------------------------------------------------------------------------------------------- fine-tuning


def _finetuning(records: dict[str, Any]) -> str:
    runs = records["finetuning"]
    if not runs:
        return "<p>This run fine-tuned no model.</p>"
    out = []
    for task, group in groupby(runs, key=lambda r: r["task"]):
        group = [r for r in group if r["epochs"]]
        if not group:
            continue
        best = next((r for r in group if r["best"]), group[0])
        metrics = [k for k in best["epochs"][0] if k not in ("epoch", "train_loss")]
        rows = [[_td(e["epoch"]), _td(e.get("train_loss"), True), *[_td(e.get(m), True) for m in metrics]]
                for e in best["epochs"]]
        summary = (f"Best epoch {best.get('best_epoch')}: dev {best['main_metric']} "
                   f"{_num(best['dev'].get(best['main_metric']))}; "
                   + ("this epoch's model is the one evaluated and registered." if _registered(records, task) else
                      "this epoch's model is the one kept; this run did not register it (the task timeline "
                      "says why)."))
        if len(group) > 1:
            summary += f" Search over {len(group)} trials; the best was {best['trial']} (its epochs below)."
        out.append(f"<h3>{_e(task)}</h3>" + _img(plots.finetuning(group), f"fine-tuning curves of {task}")
                   + f"<p>{_e(summary)}</p>" + _table(["epoch", "train loss", *metrics], rows))
    return "\n".join(out)


def _registered(records: dict[str, Any], task: str) -> bool:
    """Whether the run registered a version of the task's model (a failed run may have fine-tuned without)."""
    from bert_core.errors import BertPipelineError
    from operators.registry import model_name

    try:
        names = {model_name(task), model_name(task, version_2=True)}  # bert-squad or bert-squad2
    except BertPipelineError:  # a task this version's catalog does not know: its usual name
        names = {f"bert-{task}"}
    return any(d["name"] in names for d in records["registry"])


# ---------------------------------------------------------------------------------------------- nightly


def _nightly(records: dict[str, Any]) -> str:
    """The night's judgment as compare_and_report made it: the verdict, every figure measured with its reference
    and allowed drop, the notes, and the history plots it drew."""
    night = records["nightly"]
    regressed = [f for f in night["findings"] if f.get("regressed")]
    if regressed:
        verdict = (f'<span class="badge bad">FAILED</span> {len(regressed)} regression(s): '
                   + ", ".join(f"<code>{_e(f['key'])}</code>" for f in regressed))
    elif not night["tonight"] and not night["versions"]:
        verdict = '<span class="badge neutral">PASSED</span> but nothing was measured (see the notes)'
    else:
        verdict = '<span class="badge good">PASSED</span> no figure regressed beyond its tolerance'
    out = [f"<p>{verdict}</p>"]
    if night["versions"]:
        out.append("<p>Versions scored on the pinned data: " + ", ".join(
            f"{_e(v['name'])} v{_e(v['version'])} ({_e(v['role'])})" for v in night["versions"]) + ".</p>")
    tol = night["tolerances"]
    if tol:
        out.append(f"<p>Tolerances (relative drop allowed): quality {_num(tol.get('quality'))}, throughput "
                   f"{_num(tol.get('throughput'))}, time to accuracy {_num(tol.get('time_to_accuracy'))}. Speed "
                   "figures are ratios ours / transformers measured in the same run (higher is better).</p>")
    by_key = {f["key"]: f for f in night["findings"]}
    keys = sorted(set(night["tonight"]) | set(by_key))
    rows = []
    for key in keys:
        f = by_key.get(key, {})
        value = f.get("current", night["tonight"].get(key))
        status = "REGRESSED" if f.get("regressed") else (f.get("note") or ("ok" if f else "no reference"))
        change = f.get("delta")
        rows.append([_td(key), _td(value, numeric=True), _td(f.get("reference"), numeric=True),
                     _td("—" if change is None else f"{change:+.4g}", numeric=False),
                     _td(f.get("allowed_drop"), numeric=True),
                     _td(status, css="fail" if f.get("regressed") else ("ok" if status == "ok" else ""))])
    if rows:
        out.append(_table(["figure", "tonight", "reference", "change", "allowed drop", "status"], rows))
    else:
        out.append("<p>Nothing was measured tonight.</p>")
    if night["notes"]:
        out.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in night["notes"]) + "</ul>")
    for name, png in sorted(night["plots"].items()):
        out.append(_img(base64.b64decode(png), f"history: {name.removesuffix('.png')}"))
    where = [f"Markdown report: <code>{_e(night['report'])}</code>"]
    if night.get("mlflow_run_id"):
        where.append(f"MLflow run <code>{_e(night['mlflow_run_id'])}</code> (experiment bert-nightly)")
    if night.get("last_good_run"):
        where.append(f"last good night: MLflow run <code>{_e(night['last_good_run'])}</code>")
    out.append(f'<p class="meta">{"; ".join(where)}.</p>')
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------- timeline


def _took(task: dict[str, Any]) -> str:
    # A killed try's end is not known (operators.run_records.write_killed_record).
    return f"{task['duration_s']:.1f} s" if task.get("duration_s") is not None else "unknown"


def _timeline(records: dict[str, Any]) -> str:
    tasks = records["tasks"]
    if not tasks:
        return ("<p>No task records (tasks/*.json): the run's tasks did not record themselves (runs made before "
                "the records existed, or not by a bert-pipeline DAG).</p>")
    start = min(dt.datetime.fromisoformat(t["started_at"]) for t in tasks)
    rows = [[_td(plots.task_label(t)), _td(t["state"], css="ok" if t["state"] == "success" else "fail"),
             _td(f"+{(dt.datetime.fromisoformat(t['started_at']) - start).total_seconds():.1f} s"),
             _td(_took(t)), _td(t.get("error") or "")] for t in tasks]
    busy = sum(t.get("duration_s") or 0 for t in tasks)
    return (_img(plots.timeline(tasks), "task timeline")
            + f"<p>Wall time {_e(_duration(_wall_seconds(tasks)))} from the first task's start to the last one's "
              f"end; the tasks' own times add up to {_e(_duration(busy))}.</p>"
            + _table(["task", "state", "started", "took", "error"], rows))


# ---------------------------------------------------------------------------------------------- serving


def serve_commands(name: str, port: int, tracking_uri: str, example: Any) -> str:
    lines = [f"export MLFLOW_TRACKING_URI={shlex.quote(tracking_uri)}",
             f"mlflow models serve -m models:/{name}@champion --env-manager local -h 127.0.0.1 -p {port}"]
    if example is not None:
        lines.append(f"curl -s 127.0.0.1:{port}/invocations -H 'Content-Type: application/json' \\\n"
                     f"     -d {shlex.quote(json.dumps(example))}")
    return "\n".join(lines)


def _serving(records: dict[str, Any]) -> str:
    decisions = records["registry"]
    champions = [d for d in decisions if d["promoted"] and str(d.get("champion_after")) == str(d["candidate"])]
    out = []
    if champions:
        out.append("<p>From the project's virtual environment (activated, so MLflow finds its server on PATH); "
                   "each in its own terminal. <code>@champion</code> follows later promotions; "
                   "<code>models:/NAME/VERSION</code> serves exactly the version named.</p>")
    for port, d in enumerate(champions, start=FIRST_SERVING_PORT):
        out.append(f"<h3>{_e(d['name'])} {_e(_version(d['candidate']))}</h3>"
                   f"<pre>{_e(serve_commands(d['name'], port, records['tracking_uri'], d.get('serving_example')))}"
                   "</pre>")
    for d in decisions:
        if d not in champions:
            out.append(f"<p>{_e(d['name'])} {_e(_version(d['candidate']))} was not promoted: the champion is "
                       f"{_e('still ' + _version(d.get('champion_after')) if d.get('champion_after') else 'none')}"
                       ".</p>")
    return "\n".join(out) or "<p>No model was promoted in this run.</p>"
