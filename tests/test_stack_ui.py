"""The local stack as a person uses it: `bert-pipeline stack up`, then the Airflow UI in headless Chromium (Debian's
chromium + chromium-driver, driven by selenium): log in, see the DAGs, trigger `bert_demo` from its form with tiny
settings, and wait for the run to succeed; each DAG's form in its sections. Screenshots of the key steps and of the
forms go to test-artifacts/stack_ui/; with BERT_UPDATE_FIGURES=1 the forms' also replace docs/figures/form-<dag>.png
(docs/orchestration.md's pictures: a run does not rewrite tracked files unless asked)."""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from evaluation.airflow_rest import AirflowApi
from tests import stack_fixture
from tests.browser import CHROMEDRIVER, CHROMIUM, MISSING, chromium

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "stack_ui"
DAGS = ("bert_demo", "bert_finetune", "bert_pretraining")
RUN_TIMEOUT_S = 360

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason=MISSING),
]

local_stack = stack_fixture.local_stack


@pytest.fixture()
def browser(tmp_path):
    driver = chromium(tmp_path / "chromium-profile")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def _wait(driver, condition, timeout: float = 60, message: str = ""):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.5).until(condition, message)


def _idle(driver) -> None:
    """Leave the Airflow UI while a test waits on the REST API: an open DAG page keeps polling the API server and
    re-rendering (a third of a core for Chromium and the API server on a 2-core machine, taken from the run)."""
    driver.get("about:blank")


def _shot(driver, name: str) -> None:
    driver.save_screenshot(str(ARTIFACTS / name))


def _login(driver, stack) -> None:
    from selenium.webdriver.common.by import By

    user, password = stack.airflow_credentials()
    driver.get(stack.airflow_url + "/")
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "input[name=username]"), message="no login form")
    driver.find_element(By.CSS_SELECTOR, "input[name=username]").send_keys(user)
    driver.find_element(By.CSS_SELECTOR, "input[name=password]").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    _wait(driver, lambda d: "/auth/login" not in d.current_url, message="login did not leave the login page")


def _dag_links(driver) -> set[str]:
    from selenium.webdriver.common.by import By

    return {link.text for link in driver.find_elements(By.CSS_SELECTOR, "a[href*='/dags/']")}


# Text fields: the native value setter (React tracks the last value it set and ignores a plain assignment),
# then an input event, as typing would send. Typing key by key with send_keys dropped characters of long paths
# on a loaded 2-core machine (the form re-renders on every key).
SET_TEXT_JS = """
const [field, value] = arguments;
field.focus();
// The native setter of the element's own kind (input or textarea): React tracks the value it set last.
Object.getOwnPropertyDescriptor(Object.getPrototypeOf(field), "value").set.call(field, value);
field.dispatchEvent(new Event("input", {bubbles: true}));
field.blur();
"""


def _reveal(driver, field) -> None:
    """Open the form section holding `field`: the form shows one section at a time, the others folded."""
    from selenium.webdriver.common.by import By

    if not field.is_displayed():
        content = field.find_element(By.XPATH, "./ancestor::*[@data-part='item-content']")
        trigger = driver.find_element(By.ID, content.get_attribute("aria-labelledby"))
        trigger.click()
        _wait(driver, lambda d: trigger.get_attribute("aria-expanded") == "true" and field.is_displayed(), timeout=10,
              message=f"the form section {trigger.text!r} did not open")
        _settled(driver, content)  # it opens with an animation: fields move until it ends


def _set_field(driver, dialog, param: str, value) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    # A Param of several types (e.g. integer or string: --num-workers 2 or MIN:MAX) is a text area in the form.
    field = dialog.find_element(By.CSS_SELECTOR, f"input[name=element_{param}], textarea[name=element_{param}]")
    _reveal(driver, field)
    # In the middle of the dialog: scrolled to its top edge, the dialog's header would take the click.
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", field)
    if field.get_attribute("role") == "spinbutton":
        # Number fields keep their own state and ignore a synthetic input event: type the (short) number.
        field.click()
        field.send_keys(Keys.CONTROL, "a")
        field.send_keys(str(value), Keys.TAB)
    else:
        driver.execute_script(SET_TEXT_JS, field, str(value))
    _wait(driver, lambda d: field.get_attribute("value") == str(value), timeout=10,
          message=f"the form's {param} field did not take {value!r}")


def test_stack_status_and_up_again_are_no_ops(local_stack):
    status = local_stack.cli("status", timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    for url in (local_stack.mlflow_url, local_stack.ray_dashboard_url, local_stack.airflow_url):
        assert url in status.stdout
    assert f"GCS {local_stack.ray_address}" in status.stdout

    again = local_stack.cli("up", timeout=60)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("already running") == 3 and "starting" not in again.stdout
    state = json.loads((local_stack.logs / "state.json").read_text())
    assert state["ports"] == {"mlflow": local_stack.mlflow_port, "airflow": local_stack.airflow_port,
                              "ray_dashboard": local_stack.ray_dashboard_port, "ray_gcs": local_stack.ray_gcs_port}


def test_trigger_bert_demo_from_the_airflow_ui(local_stack, browser, minilm_dir):
    from selenium.webdriver.common.by import By

    api = AirflowApi(local_stack.airflow_url, *local_stack.airflow_credentials())
    _login(browser, local_stack)

    # The DAG list: the DAG processor parses pipelines/ shortly after start-up; once the API knows every DAG, the
    # page shows them all when it has rendered.
    api.wait_for_dags(DAGS)
    browser.get(local_stack.airflow_url + "/dags")
    _wait(browser, lambda d: set(DAGS) <= _dag_links(d), timeout=60,
          message=f"the DAG list does not show all of {DAGS}")
    _shot(browser, "01-dag-list.png")
    assert api.get("/api/v2/importErrors")["total_entries"] == 0

    # bert_demo's trigger form (in sections: docs/figures/form-bert_demo.png), with settings that make the run quick.
    dialog = _open_trigger_form(browser, local_stack, "bert_demo")
    _sections_and_screenshot(browser, api, dialog, "bert_demo")
    # The demo's own model (MiniLM) to fine-tune: a tiny random BERT stays at chance on SST-2, and promotion (with
    # its serving check, below) refuses a model no better than always answering the majority label. Corpus and
    # vocab are left unset (their defaults).
    model = minilm_dir
    work_dir = local_stack.home / "ui-run"
    # Fine-tuning in the task processes (finetune_num_workers 0): a Ray Train start-up per fine-tuning would double
    # the run's time; pretraining still runs on the stack's Ray head, on one worker (two: the REST test below).
    # In the form's order (section by section: one opens at a time).
    conf = {"dupe_factor": 1, "model": str(model), "pretrain_num_steps": 2, "pretrain_batch_size": 4,
            "finetune_epochs": 1, "squad_epochs": 1, "pretrain_num_workers": 1, "finetune_num_workers": 0,
            "work_dir": str(work_dir)}
    for param, value in conf.items():
        _set_field(browser, dialog, param, value)
    # A new DAG is paused; the form offers to unpause it on trigger, ticked by default.
    unpause = dialog.find_elements(By.XPATH, ".//label[contains(., 'Unpause bert_demo on trigger')]//input")
    assert not unpause or unpause[0].is_selected()
    _shot(browser, "02-trigger-form.png")
    trigger = next(b for b in dialog.find_elements(By.CSS_SELECTOR, "button") if b.text.strip() == "Trigger")
    _wait(browser, lambda d: trigger.is_enabled(), timeout=10, message="the Trigger button stays disabled")
    before = {r["dag_run_id"] for r in api.get("/api/v2/dags/bert_demo/dagRuns")["dag_runs"]}
    trigger.click()

    new_runs = _wait(browser, lambda d: [r for r in api.get("/api/v2/dags/bert_demo/dagRuns")["dag_runs"]
                                         if r["dag_run_id"] not in before], timeout=60,
                     message="no new bert_demo run after Trigger")
    assert len(new_runs) == 1
    run = new_runs[0]
    assert run["triggered_by"] == "ui"
    assert {k: run["conf"][k] for k in conf} == conf, "the run's conf is not what the form was given"
    run_id = run["dag_run_id"]
    _unpaused_by_the_form(browser, api, "bert_demo")
    _idle(browser)

    run = api.wait_for_run("bert_demo", run_id, timeout=RUN_TIMEOUT_S)
    browser.get(f"{local_stack.airflow_url}/dags/bert_demo/runs/{urllib.parse.quote(run_id, safe='')}")
    _wait(browser, lambda d: run_id in (text := d.find_element(By.TAG_NAME, "body").text)
          and run["state"] in text.lower(), message=f"the run page does not show run {run_id} {run['state']}")
    _shot(browser, "03-run-finished.png")
    assert run["state"] == "success", (api.failed_tasks("bert_demo", run_id)
                                       + _why_not_running(api, local_stack, "bert_demo"))

    # The tasks used the stack's MLflow server (not an embedded store) and registered the demo's models there.
    summary = json.loads((work_dir / "demo_summary.json").read_text())
    assert summary["tracking_uri"] == local_stack.mlflow_url
    with urllib.request.urlopen(f"{local_stack.mlflow_url}/api/2.0/mlflow/registered-models/search",
                                timeout=30) as response:
        registered = {m["name"] for m in json.loads(response.read()).get("registered_models", [])}
    assert {m["name"] for m in summary["models"]} <= registered
    # Promotion loaded the registered fine-tuned models from the server (a download) and removed that copy.
    checked = [m["name"] for m in summary["models"] if (m.get("serving_check") or {}).get("examples")]
    assert {"bert-sst-2", "bert-squad"} <= set(checked), summary["models"]
    assert not [str(p) for p in local_stack.tmp.rglob("MLmodel")]
    # ... and pretraining ran on the stack's Ray head: the task process joined it as a Ray driver.
    # The head checks Ray's token (its GCS and raylet listen on every interface): refused without it.
    jobs_url = f"{local_stack.ray_dashboard_url}/api/jobs/"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(jobs_url, timeout=30)
    assert refused.value.code == 401
    token = Path(local_stack.client_env()["RAY_AUTH_TOKEN_PATH"]).read_text().strip()
    assert oct(Path(local_stack.client_env()["RAY_AUTH_TOKEN_PATH"]).stat().st_mode & 0o777) == "0o600"
    request = urllib.request.Request(jobs_url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        jobs = json.loads(response.read())
    assert any(j.get("type") == "DRIVER" and j.get("status") == "SUCCEEDED" for j in jobs), jobs


FIGURES = Path(__file__).resolve().parent.parent / "docs" / "figures"


def _section_triggers(dialog) -> list:
    """The form's section headers (buttons that open and fold a section)."""
    from selenium.webdriver.common.by import By

    return dialog.find_elements(By.CSS_SELECTOR, "[data-part=item-trigger]")


def test_the_nightly_form_reads_like_a_recipe(local_stack, browser):
    """The nightly regression's form in its own sections (the other DAGs' forms are checked where their tests
    open them)."""
    api = AirflowApi(local_stack.airflow_url, *local_stack.airflow_credentials())
    _login(browser, local_stack)
    api.wait_for_dags(["bert_nightly_regression"])
    _sections_and_screenshot(browser, api, _open_trigger_form(browser, local_stack, "bert_nightly_regression"),
                             "bert_nightly_regression")
    _idle(browser)


def _sections_and_screenshot(driver, api: AirflowApi, dialog, dag_id: str) -> None:
    """The trigger form reads like a recipe: its Params in sections (data, model, optimization, ..., each titled
    with its sentence), in operators.params.SECTIONS' order, as the API serves them, all folded when the form
    opens. Then a screenshot of the form with its first section open (see the module's docstring for where)."""
    from operators.params import SECTIONS

    params = api.get(f"/api/v2/dags/{dag_id}/details")["params"]
    served = list(dict.fromkeys(spec["schema"].get("section") for spec in params.values()))
    assert served == sorted(served, key=list(SECTIONS.values()).index), (dag_id, served)
    triggers = _wait(driver, lambda d: _section_triggers(dialog), message=f"{dag_id}: no form sections")
    assert [t.text for t in triggers] == [*served, "Advanced Options"], (dag_id, [t.text for t in triggers])
    assert all(t.get_attribute("aria-expanded") == "false" for t in triggers), dag_id  # the titles read first
    size = driver.get_window_size()
    driver.set_window_size(1400, 2600)  # tall enough for a whole form with its first section open
    triggers[0].click()
    _wait(driver, lambda d: triggers[0].get_attribute("aria-expanded") == "true", timeout=10,
          message=f"{dag_id}: the first section did not open")
    _settled(driver, dialog)  # the section opens with an animation
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    dialog.screenshot(str(ARTIFACTS / f"form-{dag_id}.png"))
    if os.environ.get("BERT_UPDATE_FIGURES") == "1":
        shutil.copyfile(ARTIFACTS / f"form-{dag_id}.png", FIGURES / f"form-{dag_id}.png")
    driver.set_window_size(size["width"], size["height"])


def _settled(driver, element) -> None:
    """Until the element's height has stayed the same over three looks, 0.15 s apart (a section's opening
    animation takes about 0.2 s)."""
    from selenium.webdriver.support.ui import WebDriverWait

    heights: list[int] = []
    WebDriverWait(driver, 15, poll_frequency=0.15).until(
        lambda d: heights.append(element.size["height"]) or heights[-3:] == [heights[-1]] * 3,
        "the form kept changing its size")


def _unpaused_by_the_form(driver, api: AirflowApi, dag_id: str) -> None:
    """Until the DAG is unpaused: "Unpause on trigger" is a PATCH of the DAG the form sends besides the trigger;
    leaving the page as soon as the run existed most likely cancelled it on a busy machine (twice in the full
    suite the run stayed queued with its DAG paused and the scheduler healthy; not seen since this wait).
    A DAG still paused after 60 s fails here, naming the checkbox."""
    _wait(driver, lambda d: not api.get(f"/api/v2/dags/{dag_id}")["is_paused"], timeout=60,
          message=f"{dag_id} is still paused after a trigger with 'Unpause {dag_id} on trigger' ticked")


def _why_not_running(api: AirflowApi, stack, dag_id: str) -> str:
    """What keeps a run queued: its DAG still paused (the form's "Unpause on trigger" did not take: seen in the
    full suite on 2 busy cores, never alone), or a scheduler without a recent heartbeat; and the API's answers to
    the requests that change the DAG (the UI's unpause is a PATCH of /api/v2/dags/<dag_id>)."""
    paused = api.get(f"/api/v2/dags/{dag_id}")["is_paused"]
    scheduler = api.get("/api/v2/monitor/health").get("scheduler", {})
    log = (stack.logs / "airflow.log").read_text(errors="replace").splitlines()
    changes = [line[-400:] for line in log if ("method=PATCH" in line or "method=POST" in line) and dag_id in line
               or "database is locked" in line]
    return f"\n{dag_id} paused: {paused}; scheduler: {scheduler}\n" + "\n".join(changes[-20:])


def _open_trigger_form(driver, stack, dag_id: str):
    from selenium.webdriver.common.by import By

    driver.get(f"{stack.airflow_url}/dags/{dag_id}")
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "button[aria-label='Trigger Dag']"))[0].click()
    return _wait(driver, lambda d: next((x for x in d.find_elements(By.CSS_SELECTOR, "[role=dialog]")
                                         if x.is_displayed() and f"Trigger Dag - {dag_id}" in x.text), None),
                 message=f"the trigger form of {dag_id} did not open")


@pytest.mark.parametrize("dag_id", ["bert_pretraining", "bert_finetune"])
def test_trigger_forms_start_with_their_defaults_and_bad_conf_fails_the_plan(local_stack, browser, dag_id):
    """Each DAG's form, left at its defaults, can be triggered (no field is required that has a documented
    default) and starts a run with exactly the DAG's defaults; a bad conf sent through the REST API fails the
    first task at once, naming the param."""
    from selenium.webdriver.common.by import By

    api = AirflowApi(local_stack.airflow_url, *local_stack.airflow_credentials())
    _login(browser, local_stack)
    api.wait_for_dags([dag_id])
    dialog = _open_trigger_form(browser, local_stack, dag_id)
    dag = api.get(f"/api/v2/dags/{dag_id}/details")
    defaults = {name: spec.get("value") for name, spec in dag["params"].items()}
    # The form marks a field required (an asterisk, `required`) when its type has no null: fine for a field
    # that shows its default value, wrong for one whose documented default is "empty" (it could not be left so).
    # Read once the form has rendered its fields (it renders them together).
    required_fields = _wait(browser, lambda d: dialog.find_elements(
        By.CSS_SELECTOR, "input[required], textarea[required]"), timeout=30,
                            message=f"{dag_id}: the form shows no required field")
    _shot(browser, f"04-{dag_id}-form.png")
    required = {f.get_attribute("name").removeprefix("element_") for f in required_fields}
    empty_default = {name for name in required if defaults.get(name) in (None, "", [], {})}
    assert not empty_default, f"{dag_id}: required fields with an empty default: {empty_default}"
    _sections_and_screenshot(browser, api, dialog, dag_id)
    trigger = next(b for b in dialog.find_elements(By.CSS_SELECTOR, "button") if b.text.strip() == "Trigger")
    _wait(browser, lambda d: trigger.is_enabled(), timeout=10, message=f"{dag_id}: Trigger stays disabled")
    before = {r["dag_run_id"] for r in api.get(f"/api/v2/dags/{dag_id}/dagRuns")["dag_runs"]}
    trigger.click()
    runs = _wait(browser, lambda d: [r for r in api.get(f"/api/v2/dags/{dag_id}/dagRuns")["dag_runs"]
                                     if r["dag_run_id"] not in before], timeout=60,
                 message=f"no new {dag_id} run after Trigger")
    run = runs[0]
    _unpaused_by_the_form(browser, api, dag_id)
    _idle(browser)
    assert run["triggered_by"] == "ui" and {k: run["conf"].get(k) for k in defaults} == defaults
    # Started is enough here (a default run takes minutes on 2 cores): stop it.
    quoted = urllib.parse.quote(run["dag_run_id"], safe="")
    api.call("PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{quoted}", {"state": "failed"})
    # And stopped: its task processes end and write their last states first. On the SQLite stack those writes
    # and the next trigger's contend for the one write lock (seen under load: the trigger answered 500, or the new
    # run stayed queued for minutes).
    unfinished = ("running", "queued", "scheduled", "restarting", "up_for_retry", "deferred")
    _wait(browser, lambda d: not [t for t in api.task_instances(dag_id, run["dag_run_id"]) if t["state"] in unfinished],
          timeout=120, message=f"the stopped {dag_id} run still has unfinished tasks")

    bad = {"bert_pretraining": ({"phases": [{"num_steps": 2}, {"max_seq_length": 1024}]},
                                "phases[1]: max_seq_length 1024 is longer than the model's 512 positions"),
           "bert_finetune": ({"tasks": {"sst-2": ""}, "overrides": {"sst-2": {"epoch": 1}}},
                             "overrides.sst-2.epoch: not a fine-tuning setting")}[dag_id]
    created = api.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": bad[0]})
    finished = api.wait_for_run(dag_id, created["dag_run_id"], timeout=300)
    airflow_log = (local_stack.logs / "airflow.log").read_text(errors="replace")[-4000:]
    assert finished["state"] == "failed", (f"{finished}{_why_not_running(api, local_stack, dag_id)}"
                                           f"\nairflow.log ends:\n{airflow_log}")
    states = {t["task_id"]: t["state"] for t in api.get(
        f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(created['dag_run_id'], safe='')}/taskInstances"
    )["task_instances"]}
    # Nothing ran past the plan but the run's report (a teardown: it runs whatever the outcome, and says so).
    assert states.pop("plan") == "failed" and states.pop("report") == "success", states
    assert "success" not in states.values(), states
    assert bad[1] in api.task_log(dag_id, created["dag_run_id"], "plan")
