"""`bert-pipeline promote NAME VERSION`: put a registered version through the promotion gates, promote it by hand
over them (`--override`, a rollback), or reject it (`--reject`).

The same decision a DAG run or `export --promote` makes (operators.registry.promote): the version's recorded
metrics against the champion's, the model's floors, chance on its dev data and the serving check, inside the
registry's promotion lock. What one on call needs after a night's run: clear a worse candidate nobody decided on,
put back the previous champion, or promote a version registered without `--promote`.
"""

from __future__ import annotations

import argparse
import json

from bert_pipeline.commands.config_flags import HOME_MLFLOW


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("exit status: 0 promoted (or rejected, as asked), 1 refused by the gates (the reasons are "
                     "printed), 2 an error (no such version, the champion rejected)")
    parser.add_argument("name", metavar="NAME", help="the registered model, e.g. bert-sst-2 or bert-pretrained")
    parser.add_argument("version", metavar="VERSION", help="its version number (the MLflow UI's 'Version N')")
    decision = parser.add_mutually_exclusive_group()
    decision.add_argument("--override", metavar="WHY",
                          help="promote it whatever the metric gates say (e.g. a rollback to the previous "
                          "champion); the serving check still applies, and WHY is recorded with the gates' "
                          "findings in its promotion.* tags")
    decision.add_argument("--reject", metavar="WHY",
                          help="record that it is not to be served (promotion.decision = rejected, with WHY): the "
                          "nightly then shows its figures without failing on them; the champion cannot be rejected")
    parser.add_argument("--report", metavar="FILE_OR_URI",
                        help="also write the decision as JSON there (as a DAG run's registry/NAME-vN.json)")
    parser.add_argument("--json", action="store_true", help="print the decision as JSON instead of text")
    parser.add_argument("--tracking-uri", metavar="URI",
                        help=f"the MLflow registry (default: {HOME_MLFLOW})")


def describe(report: dict) -> list[str]:
    """The decision in lines a person reads: what happened to the alias, why, and what can be done about it."""
    name, version, before = report["name"], report["candidate"], report["champion_before"]
    reasons = report["reasons"]
    if report["promoted"] and before == version:
        head, reasons = f"{name} v{version}: already the champion", []
    elif report.get("rejected_by_hand"):
        head = f"{name} v{version}: rejected; the champion " + (f"stays v{before}" if before else "stays unset")
    elif report["promoted"]:
        head = (f"{name} v{version}: promoted to champion"
                + (f" (v{before} is now previous)" if before else " (the first champion)"))
    else:
        head = f"{name} v{version}: not promoted; the champion " + (f"stays v{before}" if before else "stays unset")
    lines = [head, *(f"  {reason}" for reason in reasons)]
    champion = report.get("champion_metrics") or {}
    for metric, value in sorted((report.get("candidate_metrics") or {}).items()):
        against = f" (champion v{before}: {champion[metric]:.6g})" if metric in champion and before != version else ""
        lines.append(f"  {metric}: {value:.6g}{against}")
    # Refused by the gates (not a rejection by hand, nor a model that does not serve, which no override passes):
    if report["promoted"] is False and "gates" in report and not (report.get("serving_check") or {}).get("problems"):
        lines.append(f"To promote it over the gates: bert-pipeline promote {name} {version} --override 'WHY'; "
                     f"to clear it from the nightly: --reject 'WHY'")
    return lines


def run(args: argparse.Namespace) -> int:
    from bert_core.errors import BertPipelineError
    from operators import registry

    for flag, why in (("--reject", args.reject), ("--override", args.override)):
        if why is not None and not why.strip():
            raise BertPipelineError(f"{flag} needs a reason (WHY): it is recorded on the version for whoever looks "
                                    "next")
    if args.tracking_uri is None:
        # The home's MLflow is the stack's server while one is up there, as for predict, run and report.
        from bert_pipeline.embedded_home import use_stack_mlflow
        from bert_pipeline.stack.state import stack_home

        use_stack_mlflow(stack_home(None))
    if args.reject is not None:
        report = registry.reject(args.name, args.version, args.reject, args.tracking_uri, report_path=args.report)
    else:
        report = registry.promote(args.name, args.version, tracking_uri=args.tracking_uri, report_path=args.report,
                                  override=args.override)
    print(json.dumps(report, indent=2) if args.json else "\n".join(describe(report)))
    # A rejection asked for is what was asked; a promotion the gates refused is not.
    return 0 if report["promoted"] or args.reject is not None else 1
