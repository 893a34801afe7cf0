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
- per restart of the worker group: the checkpoint it resumed from, its size, the steps it redid, and the time
  it cost: from the last step before it to the first step beyond any reached before it, less one step at the
  full size's pace (the median step time of the last full-size group up to it). For a drain this holds the hold
  until the node goes; for a fixed-size group the wait for the node to come back;
- for a group smaller than the largest (the elastic run while the node is away): the time its new steps took
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

from evaluation.default_inputs import existing
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
    one) does not turn into lost or won time: a restart costs the time from the last step before it to the first
    step beyond any reached before it, less one step at the full size's pace (the median step time of the last
    full-size group up to it); a group smaller than the largest costs the time its new steps took beyond that
    pace."""
    if not timeline:
        raise ValueError("no step records: the run recorded nothing")
    events = events or {}
    origin = timeline[0]["time"]
    attempts = split_attempts(timeline)
    records = {a["attempt"]: [r for r in timeline if r["attempt"] == a["attempt"]] for a in attempts}
    full = max(a["world"] for a in attempts)
    for attempt in attempts:
        attempt["step_s"] = _step_s(records[attempt["attempt"]])
    restarts, reduced = [], []
    for i, attempt in enumerate(attempts):
        full_s = next((a["step_s"] for a in reversed(attempts[:i + 1]) if a["world"] == full and a["step_s"]), None)
        reached = max((r["step"] for r in timeline if r["time"] < attempt["start"]), default=0)
        progress = next((r for r in records[attempt["attempt"]] if r["step"] > reached), None)
        if i:
            previous = attempts[i - 1]
            restart = {"resumed_from_step": attempt["first_step"] - 1, "world": attempt["world"],
                       "steps_redone": max(0, min(reached, attempt["last_step"]) - (attempt["first_step"] - 1)),
                       "seconds_without_steps": attempt["start"] - previous["end"],
                       "at_s": attempt["start"] - origin}
            if progress is not None and full_s is not None:
                restart["seconds_lost"] = progress["time"] - previous["end"] - full_s
            restarts.append(restart)
        if attempt["world"] < full and progress is not None and full_s is not None:
            steps = attempt["last_step"] - progress["step"]
            seconds = attempt["end"] - progress["time"]
            reduced.append({"world": attempt["world"], "steps": steps, "seconds": seconds,
                            "step_s": attempt["step_s"], "full_size_step_s": full_s,
                            "seconds_lost": seconds - steps * full_s})
    steps = [r["step"] for r in timeline]
    figures = {
        "steps": max(steps), "step_executions": len(steps), "steps_redone": len(steps) - len(set(steps)),
        "span_s": timeline[-1]["time"] - origin, "full_size_step_s": attempts[0]["step_s"],
        "time_lost_s": sum(r.get("seconds_lost", 0.0) for r in restarts) + sum(r["seconds_lost"] for r in reduced),
        "restarts": restarts, "reduced_size": reduced, "worlds": [a["world"] for a in attempts],
    }
    lost = events.get("node_lost")
    if lost is not None:
        reached = max((r["step"] for r in timeline if r["time"] <= lost), default=0)
        later = [r for r in timeline if r["time"] > lost and any(
            a["attempt"] == r["attempt"] and a["start"] > lost for a in attempts)]
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


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (steps_ax, world_ax) = plt.subplots(2, 1, figsize=(9, 7), sharex=True, height_ratios=(3, 1))
    for entry in results["cases"].values():
        xs = [t / 60 for t, *_ in entry["timeline"]]
        line, = steps_ax.plot(xs, [s for _, s, *_ in entry["timeline"]], linewidth=1.4, label=entry["label"],
                              linestyle="--" if entry["case"]["loss"] is None else "-")
        world_ax.step(xs, [w for _, _, w, _ in entry["timeline"]], where="post", color=line.get_color(), linewidth=1.2)
        for event, marker in (("notice", "v"), ("node_lost", "x"), ("node_back", "^")):
            if event in entry["events_s"]:
                at = entry["events_s"][event]
                step = max((s for t, s, *_ in entry["timeline"] if t <= at), default=0)
                steps_ax.plot(at / 60, step, marker=marker, color=line.get_color(), markersize=8)
    steps_ax.set_ylabel("optimizer step")
    steps_ax.set_title("Step against wall-clock; v notice, x node lost, ^ node back")
    steps_ax.grid(alpha=0.3)
    steps_ax.legend(fontsize=8)
    world_ax.set_ylabel("workers")
    world_ax.set_xlabel("minutes since the first step")
    world_ax.set_yticks([1, 2])
    world_ax.grid(alpha=0.3)
    fig.tight_layout()
    _replace(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)


def summary_lines(results: dict) -> list[str]:
    lines = []
    for entry in results["cases"].values():
        f = entry["figures"]
        restarts = "; ".join(f"{r['world']} worker(s) from step {r['resumed_from_step']} after "
                             f"{r['seconds_without_steps']:.0f} s without steps, {r['steps_redone']} redone, "
                             f"{r.get('seconds_lost', float('nan')):.0f} s lost"
                             for r in f["restarts"]) or "none"
        lines.append(f"{entry['label']}: {f['span_s']:.0f} s for {f['steps']} steps, time lost "
                     f"{f['time_lost_s']:.0f} s, steps redone {f['steps_redone']}; restarts: {restarts}")
    return lines


def _replace(path: Path, write) -> None:
    """Write through a temp file in the same folder, then rename: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        pass
    try:
        write(tmp.name)
        os.replace(tmp.name, path)
    finally:
        Path(tmp.name).unlink(missing_ok=True)


def parse_args(argv: list[str] | None = None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="python -m evaluation.elastic_recovery",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
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
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                    "torch": torch.__version__, "ray": ray.__version__},
        "settings": {k: v for k, v in vars(args).items() if k not in ("out_json", "plot", "ray_logs", "refigure")},
        "cases": {},
    }
    with moto_s3():
        storage.s3_client().create_bucket(Bucket=BUCKET)
        storage.upload_dir(Path(train_dir), f"s3://{BUCKET}/shards")
        storage.upload_dir(Path(heldout_dir), f"s3://{BUCKET}/heldout")
        for key in args.cases:
            entry = run_case(CASES[key], args, f"s3://{BUCKET}/shards", f"s3://{BUCKET}/heldout")
            results["cases"][key] = entry
            print(summary_lines({"cases": {key: entry}})[0], flush=True)
            _replace(out_json, lambda tmp: Path(tmp).write_text(json.dumps(results, indent=1) + "\n"))
    compare_to_undisturbed(results)
    _replace(out_json, lambda tmp: Path(tmp).write_text(json.dumps(results, indent=1) + "\n"))
    plot(results, plot_path)
    print(f"results: {out_json}; plot: {plot_path}")
    return results


if __name__ == "__main__":
    main()
