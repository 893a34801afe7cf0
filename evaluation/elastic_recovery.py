"""Recovery from a lost node: elastic pretraining (--num-workers 1:2) against the fixed-size restart Ray Train does
when elasticity is off (--num-workers 2), for a node lost with a drain notice and without one.

One run, one machine, a loopback multi-node cluster (evaluation.loopback_cluster): a head with no CPUs and two
1-CPU worker nodes, each its own `ray start`; shards, Ray Train's checkpoints and the output on a moto S3 server
(the nodes of a real cluster share no disk, so the checkpoint traffic goes through the S3 protocol as there).
The data is real text: --corpus through `segment` and `make-shards`. Every case is a fresh cluster and the same
pretraining run (model, seed, shards, --batch-size, --ckpt-interval). Once step --loss-step is recorded, this
program plays the cloud and takes node_b away:

- drain: a preemption notice through Ray's drain API with a deadline --notice-s ahead; the node goes at the
  deadline (what AWS, GCP and Azure do: 120 s, 30 s, 30 s);
- kill: node_b's raylet SIGKILLed, no notice (the machine vanishes);

and starts node_b again --outage-s seconds after it went (a replacement machine joins), so that the fixed-size
run, which waits for two workers, can finish, and the elastic one grows back. An undisturbed fixed-size run is
the reference curve.

Reported per case, from the step records (evaluation.step_timeline: rank 0 writes the time, world size and
worker-group attempt of every step it runs), each term measured next to where it happens, because the load of a
shared machine drifts over a run and a comparison of whole runs would count that drift as won or lost time:
- per restart of the worker group: the checkpoint it resumed from, its size, the steps it redid;
- stalls: from the last step beyond all before it to the next such step, where a restart lies between, less
  one step at the full size's pace (the median step time of the last full-size group up to then). A stall holds
  whatever happened in it: the hold after a drain notice, the wait for a node, the restart, redone steps, and a
  smaller group's steps that a grow then threw away (a grow restarts from the latest checkpoint);
- for a group smaller than the largest (the elastic run while the node is away): the time its progress took
  beyond the full size's pace;
- training time lost: the sum of both; steps redone: step executions beyond one per step;
- the first-to-last-step time less the undisturbed run's, which also holds the load drift between runs.
Timings are never asserted anywhere; the machine's load average is recorded beside them.

    python -m evaluation.elastic_recovery --out-json docs/figures/elastic_recovery.json
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import os
import platform
import statistics
import tempfile
import threading
import time
from pathlib import Path

from evaluation.cli_help import DefaultsHelpFormatter
from evaluation.default_inputs import existing
from evaluation.machine import cpu_name
from evaluation.pretrain_convergence import DEFAULT_CORPUS, DEFAULT_VOCAB

BUCKET = "elastic-bench"
LOST_NODE = "node_b"
WORKERS = ("node_a", LOST_NODE)


@dataclasses.dataclass(frozen=True)
class Case:
    key: str
    num_workers: str  # "1:2" (elastic) or "2" (fixed)
    loss: str | None  # "drain", "kill" or None (undisturbed)

    @property
    def label(self) -> str:
        group = "elastic 1:2" if ":" in self.num_workers else f"fixed {self.num_workers}"
        return f"{group}, " + {"drain": "drain notice", "kill": "killed (no notice)", None: "undisturbed"}[self.loss]


CASES = {case.key: case for case in (
    Case("elastic-drain", "1:2", "drain"), Case("fixed-drain", "2", "drain"),
    Case("elastic-kill", "1:2", "kill"), Case("fixed-kill", "2", "kill"),
    Case("undisturbed", "2", None),
)}


# --------------------------------------------------------------------------- what a timeline shows


def split_attempts(timeline: list[dict]) -> list[dict]:
    """The worker-group attempts of a recorded timeline (records as evaluation.step_timeline writes them, in time
    order), in the order they ran: attempt token, world size, first and last step, first and last record time."""
    attempts: dict[str, dict] = {}
    for record in timeline:
        attempt = attempts.setdefault(record["attempt"], {
            "attempt": record["attempt"], "world": record["world"], "first_step": record["step"],
            "start": record["time"], "records": 0})
        attempt.update(last_step=record["step"], end=record["time"])
        attempt["records"] += 1
    return sorted(attempts.values(), key=lambda a: a["start"])


def _step_s(records: list[dict]) -> float | None:
    """Median time between consecutive steps of one attempt (checkpoint steps and warm-up weigh little)."""
    gaps = [b["time"] - a["time"] for a, b in zip(records, records[1:]) if b["step"] == a["step"] + 1]
    return statistics.median(gaps) if gaps else None


def recovery_figures(timeline: list[dict], events: dict[str, float] | None = None) -> dict:
    """What the losses cost a run (see the module doc), from its step records in time order; `events`: when the
    notice came, the node went and came back (same clock; none for the undisturbed run).

    Every term is measured next to where it happens, so that a machine whose load drifts during the run (a shared
    one) does not turn into lost or won time. A step beyond every step before it is progress. A stall is a gap
    between two progress records with a restart of the worker group in it: it costs the gap less one step at the
    full size's pace (the median step time of the last full-size group up to its end), whatever happened in it
    (holding after a notice, waiting for a node, restarting, redoing steps, a smaller group redoing steps that a
    grow then threw away). A group smaller than the largest costs the time its progress took beyond that pace."""
    if not timeline:
        raise ValueError("no step records: the run recorded nothing")
    events = events or {}
    origin = timeline[0]["time"]
    attempts = split_attempts(timeline)
    index = {a["attempt"]: i for i, a in enumerate(attempts)}
    records = {a["attempt"]: [r for r in timeline if r["attempt"] == a["attempt"]] for a in attempts}
    full = max(a["world"] for a in attempts)
    for attempt in attempts:
        attempt["step_s"] = _step_s(records[attempt["attempt"]])

    def full_pace(upto: int) -> float:
        return next((a["step_s"] for a in reversed(attempts[:upto + 1]) if a["world"] == full and a["step_s"]),
                    attempts[0]["step_s"] or 0.0)

    restarts, done = [], attempts[0]["last_step"]
    for previous, attempt in zip(attempts, attempts[1:]):
        resumed_from = attempt["first_step"] - 1
        restarts.append({"resumed_from_step": resumed_from, "world": attempt["world"],
                         "steps_redone": max(0, min(done, attempt["last_step"]) - resumed_from),
                         "seconds_without_steps": attempt["start"] - previous["end"],
                         "at_s": attempt["start"] - origin})
        done = max(done, attempt["last_step"])
    stalls, reduced, reached, last = [], {}, 0, None
    for record in timeline:
        if record["step"] <= reached:
            continue
        at = index[record["attempt"]]
        if last is not None and index[last["attempt"]] != at:
            stalls.append({"after_step": last["step"], "at_s": last["time"] - origin, "restarts": at - index[
                last["attempt"]], "seconds": record["time"] - last["time"], "seconds_lost":
                record["time"] - last["time"] - full_pace(at)})
        elif last is not None and attempts[at]["world"] < full:
            part = reduced.setdefault(at, {"world": attempts[at]["world"], "steps": 0, "seconds": 0.0,
                                           "full_size_step_s": full_pace(at)})
            part["steps"] += record["step"] - last["step"]
            part["seconds"] += record["time"] - last["time"]
        reached, last = record["step"], record
    for part in reduced.values():
        part["seconds_lost"] = part["seconds"] - part["steps"] * part["full_size_step_s"]
    steps = [r["step"] for r in timeline]
    figures = {
        "steps": max(steps), "step_executions": len(steps), "steps_redone": len(steps) - len(set(steps)),
        "span_s": timeline[-1]["time"] - origin, "full_size_step_s": attempts[0]["step_s"],
        "time_lost_s": sum(s["seconds_lost"] for s in stalls) + sum(p["seconds_lost"] for p in reduced.values()),
        "restarts": restarts, "stalls": stalls, "reduced_size": list(reduced.values()),
        "worlds": [a["world"] for a in attempts],
    }
    lost = events.get("node_lost")
    if lost is not None:
        reached = max((r["step"] for r in timeline if r["time"] <= lost), default=0)
        later = [r for r in timeline if r["time"] > lost and attempts[index[r["attempt"]]]["start"] > lost]
        if later:
            figures["first_step_after_loss_s"] = later[0]["time"] - lost  # by a group started after the loss
        beyond = [r for r in later if r["step"] > reached]
        if beyond:
            figures["back_where_it_was_s"] = beyond[0]["time"] - lost  # a step beyond the last before the loss
    if "notice" in events and lost is not None:
        figures["steps_during_notice"] = sum(events["notice"] < r["time"] <= lost for r in timeline)
    return figures


def compare_to_undisturbed(results: dict) -> None:
    """Each case's first-to-last-step time less the undisturbed run's, when that ran (a figure that also holds
    the machine's load drift between the runs)."""
    reference = results["cases"].get("undisturbed")
    for entry in results["cases"].values():
        entry["figures"].pop("span_over_undisturbed_s", None)
        if reference is not None:
            entry["figures"]["span_over_undisturbed_s"] = entry["figures"]["span_s"] - reference["figures"]["span_s"]


# --------------------------------------------------------------------------- running a case


class Cloud(threading.Thread):
    """Plays the cloud for one case: follows the run's step records (for the progress bar), takes LOST_NODE away
    once `loss_step` is recorded (a drain notice and the node gone at its deadline, or a SIGKILL), and starts it
    again `outage_s` after it went. Event times (time.time()) go to `events`."""

    def __init__(self, cluster, records: str, case: Case, args: argparse.Namespace, bar):
        super().__init__(daemon=True)
        self.cluster, self.records, self.case, self.args, self.bar = cluster, records, case, args, bar
        self.events: dict[str, float] = {}
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self._follow()
        except BaseException as exc:  # reported by the main thread
            self.error = exc

    def _wait(self, seconds: float) -> bool:
        """Follow the records for `seconds`; False once the run is over."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self._advance_bar()
            if self.done.wait(min(0.5, max(0.0, until - time.monotonic()))):
                return False
        return True

    def _advance_bar(self) -> None:
        from evaluation.step_timeline import step_recorded

        while self.bar.n < self.args.steps and step_recorded(self.records, self.bar.n + 1):
            self.bar.update(1)

    def _follow(self) -> None:
        while self.bar.n < self.args.loss_step:
            if not self._wait(0.5):
                return
        if self.case.loss is None:
            while self._wait(1.0):
                pass
            return
        if self.case.loss == "drain":
            self.events["notice"] = time.time()
            deadline = self.cluster.drain(LOST_NODE, self.args.notice_s) / 1000
            if not self._wait(deadline - time.time()):
                return
        self.cluster.kill_raylet(LOST_NODE)
        self.events["node_lost"] = time.time()
        if not self._wait(self.args.outage_s):
            return
        self.cluster.restart_worker(LOST_NODE)
        self.events["node_back"] = time.time()
        while self._wait(1.0):
            pass


def run_case(case: Case, args: argparse.Namespace, data: str, data_eval: str) -> dict:
    from tqdm import tqdm

    from bert_core.launch.run import run_step
    from bert_core.pretrain.step import PRETRAIN, PretrainConfig
    from evaluation.loopback_cluster import joined_cluster
    from evaluation.step_timeline import RecordSteps, recorded_timeline

    records = f"s3://{BUCKET}/{case.key}/steps"
    config = PretrainConfig(
        data=data, data_eval=data_eval, eval_max_batches=args.eval_batches, model=args.model, vocab=args.vocab,
        output=f"s3://{BUCKET}/{case.key}/model", storage=f"s3://{BUCKET}/ray", run_name=case.key,
        batch_size=args.batch_size, num_steps=args.steps, seed=args.seed, ckpt_interval=args.ckpt_interval,
        log_interval=args.ckpt_interval, num_workers=case.num_workers, resize_interval=args.resize_interval,
        max_failures=args.max_failures, placement_timeout=args.outage_s + 600.0, tracking=False, progress=False)
    load_before = os.getloadavg()
    with joined_cluster(WORKERS, log_to_driver=args.ray_logs) as cluster, \
            tqdm(total=args.steps, desc=case.label, unit="step") as bar:
        cloud = Cloud(cluster, records, case, args, bar)
        cloud.start()
        try:
            result = run_step(PRETRAIN, config, hooks=[RecordSteps(records)])
        finally:
            cloud.done.set()
            cloud.join(timeout=180)
        if cloud.error is not None:
            raise RuntimeError(f"{case.label}: taking {LOST_NODE} away failed: {cloud.error}") from cloud.error
        timeline = recorded_timeline(records)
    figures = recovery_figures(timeline, cloud.events)
    origin = timeline[0]["time"]
    attempt_index = {a["attempt"]: i for i, a in enumerate(split_attempts(timeline))}
    return {
        "case": dataclasses.asdict(case), "label": case.label, "figures": figures,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "events_s": {k: v - origin for k, v in cloud.events.items()},
        "final_eval": {k: result["metrics"][k] for k in ("mlm_accuracy", "nsp_accuracy") if k in result.get("metrics", {})},
        "load_average": {"before": load_before, "after": os.getloadavg()},
        # [seconds since the first step, step, world size, attempt number]
        "timeline": [[round(r["time"] - origin, 3), r["step"], r["world"], attempt_index[r["attempt"]]]
                     for r in timeline],
    }


def saved_timeline(entry: dict) -> list[dict]:
    """A case's timeline as saved in the results ([seconds, step, world, attempt number]) back as records."""
    return [{"time": t, "step": step, "world": world, "attempt": str(attempt)} for t, step, world, attempt in
            entry["timeline"]]


def refigure(results: dict) -> dict:
    """The results with every case's figures computed again from its saved timeline and events (after a change
    to the analysis, without running the cases again)."""
    for entry in results["cases"].values():
        entry["figures"] = recovery_figures(saved_timeline(entry), entry["events_s"])
    compare_to_undisturbed(results)
    return results


# --------------------------------------------------------------------------- report


def world_series(timeline: list[list]) -> tuple[list[float], list[int]]:
    """(times, workers) of a saved timeline as a step function: each group's size while it ran steps, 0 from its
    last step to the next group's first (holding after a drain notice, waiting, restarting)."""
    times: list[float] = []
    workers: list[int] = []
    for i, (t, _, world, attempt) in enumerate(timeline):
        if i and attempt != timeline[i - 1][3]:
            times.append(timeline[i - 1][0])
            workers.append(0)
        times.append(t)
        workers.append(world)
    return times, workers


def plot(results: dict, path: Path) -> None:
    """Step and worker count against wall-clock, from the first step (left) and around the node's loss (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 7), sharex="col", height_ratios=(3, 1))
    for entry in results["cases"].values():
        timeline, events = entry["timeline"], entry["events_s"]
        loss = events.get("node_lost")
        times, workers = world_series(timeline)
        style = {"linewidth": 1.4, "linestyle": "--" if entry["case"]["loss"] is None else "-"}
        groups = [[r for r in timeline if r[3] == attempt] for attempt in dict.fromkeys(r[3] for r in timeline)]
        color = None
        for i, group in enumerate(groups):  # one line per worker group: a restart is a break, not a slope
            line, = axes[0][0].plot([t / 60 for t, *_ in group], [s for _, s, *_ in group], color=color,
                                    label=None if i else entry["label"], **style)
            color = line.get_color()
        axes[1][0].step([t / 60 for t in times], workers, where="post", color=color, linewidth=1.2)
        for event, marker in (("notice", "v"), ("node_lost", "x"), ("node_back", "^")):
            if event in events:
                step = max((s for t, s, *_ in timeline if t <= events[event]), default=0)
                axes[0][0].plot(events[event] / 60, step, marker=marker, color=color, markersize=8)
        if loss is None:
            continue
        at_loss = max((s for t, s, *_ in timeline if t <= loss), default=0)
        for group in groups:
            axes[0][1].plot([t - loss for t, *_ in group], [s - at_loss for _, s, *_ in group], color=color, **style)
        axes[1][1].step([t - loss for t in times], workers, where="post", color=color, linewidth=1.2)
        for event, marker in (("notice", "v"), ("node_back", "^")):
            if event in events:
                step = max((s for t, s, *_ in timeline if t <= events[event]), default=0)
                axes[0][1].plot(events[event] - loss, step - at_loss, marker=marker, color=color, markersize=8)
    axes[0][0].set_title("step against wall-clock; v notice, x node lost, ^ node back")
    axes[0][0].set_ylabel("optimizer step")
    axes[0][0].legend(fontsize=8)
    axes[1][0].set_xlabel("minutes since the first step")
    axes[0][1].set_title("around the loss: steps beyond the last one before it")
    axes[0][1].set_ylabel("steps since the node was lost")
    axes[0][1].set_xlim(-60, 300)
    axes[0][1].axvline(0, color="grey", linewidth=0.8)
    axes[0][1].axhline(0, color="grey", linewidth=0.8)
    axes[1][1].set_xlabel("seconds since the node was lost")
    for ax in axes[1]:
        ax.set_ylabel("workers training")
        ax.set_yticks([0, 1, 2])
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    _replace(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)


def summary_lines(results: dict) -> list[str]:
    lines = []
    for entry in results["cases"].values():
        f = entry["figures"]
        restarts = "; ".join(f"{r['world']} worker(s) from step {r['resumed_from_step']} after "
                             f"{r['seconds_without_steps']:.0f} s without steps, {r['steps_redone']} redone"
                             for r in f["restarts"]) or "none"
        stalls = " + ".join(f"{s['seconds_lost']:.0f} s" for s in f["stalls"]) or "0 s"
        smaller = " + ".join(f"{p['seconds_lost']:.0f} s" for p in f["reduced_size"]) or "0 s"
        lines.append(f"{entry['label']}: {f['span_s']:.0f} s for {f['steps']} steps, time lost "
                     f"{f['time_lost_s']:.0f} s (stalls {stalls}, smaller group {smaller}), steps redone "
                     f"{f['steps_redone']}; restarts: {restarts}")
    return lines


def _replace(path: Path, write) -> None:
    """Write through a temp file in the same folder, then rename: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        pass
    try:
        write(tmp.name)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp.name, 0o666 & ~umask)  # a temp file is private; the result is not
        os.replace(tmp.name, path)
    finally:
        Path(tmp.name).unlink(missing_ok=True)


def parse_args(argv: list[str] | None = None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="python -m evaluation.elastic_recovery",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=DefaultsHelpFormatter)
    data = parser.add_argument_group("data")
    data.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="raw text, documents separated by blank lines")
    data.add_argument("--vocab", default=str(DEFAULT_VOCAB), help="WordPiece vocab.txt for the shards and model")
    data.add_argument("--work-dir", default="bench-results/elastic_recovery",
                      help="segmented text and shards (reused when up to date)")
    data.add_argument("--max-seq-length", type=int, default=128, help="shard sequence length")
    data.add_argument("--dupe-factor", type=int, default=1, help="masking passes over the documents")
    run = parser.add_argument_group("the pretraining run (the same in every case)")
    run.add_argument("--model", default="bert_2_128_2", help="zoo architecture trained from scratch")
    run.add_argument("--batch-size", type=int, default=32, help="global batch (sequences per optimizer step)")
    run.add_argument("--steps", type=int, default=300, help="optimizer steps")
    run.add_argument("--ckpt-interval", type=int, default=50, help="checkpoint every N steps")
    run.add_argument("--resize-interval", type=float, default=10.0,
                     help="how often (seconds) a running elastic group checks whether it could be larger")
    run.add_argument("--max-failures", type=int, default=10, help="restarts allowed per run")
    run.add_argument("--eval-batches", type=int, default=10, help="held-out batches of the final evaluation")
    run.add_argument("--seed", type=int, default=0)
    loss = parser.add_argument_group("the node loss")
    loss.add_argument("--loss-step", type=int, default=75,
                      help="node_b is taken away once this step is recorded (halfway between checkpoints by "
                           "default: the average case for a loss without notice)")
    loss.add_argument("--notice-s", type=float, default=30.0, help="drain cases: the notice's deadline, seconds ahead")
    loss.add_argument("--outage-s", type=float, default=60.0,
                      help="seconds between the node going and a replacement joining")
    out = parser.add_argument_group("cases and output")
    out.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES), help="which cases to run")
    out.add_argument("--out-json", default="docs/figures/elastic_recovery.json", help="results")
    out.add_argument("--plot", default=None, help="PNG of step against wall-clock (default: --out-json as .png)")
    out.add_argument("--ray-logs", action="store_true", help="print what Ray's processes log (the resize lines)")
    out.add_argument("--update", action="store_true",
                     help="keep the cases already in --out-json, replacing each case --cases names as it finishes "
                          "(each case records its own date and load)")
    out.add_argument("--refigure", action="store_true",
                     help="run nothing: compute the figures and the plot again from the timelines in --out-json")
    args = parser.parse_args(argv)
    if not 0 < args.loss_step < args.steps:
        parser.error("need 0 < --loss-step < --steps")
    return parser, args


def main(argv: list[str] | None = None) -> dict:
    parser, args = parse_args(argv)
    out_json = Path(args.out_json)
    plot_path = Path(args.plot) if args.plot else out_json.with_suffix(".png")
    if args.refigure:
        results = refigure(json.loads(existing(parser, "--out-json", out_json).read_text()))
        _replace(out_json, lambda tmp: Path(tmp).write_text(json.dumps(results, indent=1) + "\n"))
        plot(results, plot_path)
        print("\n".join(summary_lines(results)))
        return results
    existing(parser, "--corpus", args.corpus)
    existing(parser, "--vocab", args.vocab)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log

    import ray
    import torch

    from bert_core.io import storage
    from evaluation.loopback_cluster import moto_s3
    from evaluation.pretrain_convergence import prepare_data

    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    train_dir, heldout_dir = prepare_data(args.corpus, args.vocab, work, args.max_seq_length,
                                          max(1, round(0.15 * args.max_seq_length)), args.dupe_factor, 0.05)
    results: dict = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "processor": cpu_name(), "cpus": os.cpu_count(),
                    "torch": torch.__version__, "ray": ray.__version__},
        "settings": {k: v for k, v in vars(args).items()
                     if k not in ("out_json", "plot", "ray_logs", "refigure", "update", "cases")},
        "cases": {},
    }
    if args.update and out_json.exists():
        earlier = json.loads(out_json.read_text())
        if earlier["settings"] != results["settings"]:
            parser.error(f"--update: {out_json} was measured with other settings ({earlier['settings']})")
        results["cases"] = earlier["cases"]  # each replaced as its new result comes: a failed case keeps its old one
    with moto_s3():
        storage.s3_client().create_bucket(Bucket=BUCKET)
        storage.upload_dir(Path(train_dir), f"s3://{BUCKET}/shards")
        storage.upload_dir(Path(heldout_dir), f"s3://{BUCKET}/heldout")
        for key in args.cases:
            entry = run_case(CASES[key], args, f"s3://{BUCKET}/shards", f"s3://{BUCKET}/heldout")
            results["cases"][key] = entry
            results["cases"] = {k: results["cases"][k] for k in CASES if k in results["cases"]}  # CASES' order
            print(summary_lines({"cases": {key: entry}})[0], flush=True)
            _replace(out_json, lambda tmp: Path(tmp).write_text(json.dumps(results, indent=1) + "\n"))
    compare_to_undisturbed(results)
    _replace(out_json, lambda tmp: Path(tmp).write_text(json.dumps(results, indent=1) + "\n"))
    plot(results, plot_path)
    print(f"results: {out_json}; plot: {plot_path}")
    return results


if __name__ == "__main__":
    main()
