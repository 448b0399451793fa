"""The retail domain: seeded database and tasks, tools, and the reward on gold and wrong actions.

Scoring every task on the whole database costs ~0.1 s each (copy + two hashes), so the every-task
tests score on the customer's own slice of the database (their user record, their orders, the
products in those orders): the tools touch nothing else, and `test_gold_actions_on_the_full_database`
checks the same on the whole database for a sample of tasks.
"""

from __future__ import annotations

import inspect
import json

import pytest

from art_core.envs import load_environment
from art_core.envs.customer_service.domain import Action, Task, call_tool, hash_db, reward
from art_core.envs.customer_service.env import CustomerServiceEnv
from art_core.envs.retail import RETAIL
from art_core.envs.retail.db import STATUSES, make_db
from art_core.envs.retail.scenarios import make_tasks

SPLITS = ("train", "val", "test")


@pytest.fixture(scope="module")
def db():
    return make_db(0)


@pytest.fixture(scope="module")
def tasks(db):
    return make_tasks(db, 0)


def all_tasks(tasks) -> list[Task]:
    return [t for s in SPLITS for t in tasks[s]]


def customer_slice(db, user_id: str) -> dict:
    """The customer's user record, their orders and the products in them: all any of their tasks touches."""
    user = db["users"][user_id]
    orders = {o: db["orders"][o] for o in user["orders"]}
    products = {line["product_id"]: db["products"][line["product_id"]] for o in orders.values() for line in o["items"]}
    return json.loads(json.dumps({"users": {user_id: user}, "orders": orders, "products": products}))


def act(db, actions: list[Action]) -> None:
    """Play actions the way an agent does (through call_tool); every one must succeed."""
    for a in actions:
        result = call_tool(RETAIL, db, a.name, dict(a.kwargs))
        assert not result.startswith("Error"), f"{a} failed: {result}"


def said(task: Task) -> list[str]:
    return [f"Here you go: {o}." for o in task.outputs]


def test_same_seed_same_db_and_tasks_other_seed_differs(db, tasks):
    assert hash_db(make_db(0)) == hash_db(db)
    assert hash_db(make_db(1)) != hash_db(db)
    dump = lambda ts: json.dumps({s: [t.model_dump() for t in ts[s]] for s in SPLITS}, sort_keys=True)  # noqa: E731
    assert dump(make_tasks(make_db(0), 0)) == dump(tasks)
    assert dump(make_tasks(make_db(1), 1)) != dump(tasks)
    assert dump(make_tasks(db, 1)) != dump(tasks)  # the task seed alone changes the tasks too


def test_db_has_every_order_status_gift_cards_and_variants(db):
    assert {o["status"] for o in db["orders"].values()} == set(STATUSES)
    methods = [pm for u in db["users"].values() for pm in u["payment_methods"].values()]
    assert {pm["source"] for pm in methods} == {"credit_card", "paypal", "gift_card"}
    assert all(pm["balance"] >= 0 for pm in methods if pm["source"] == "gift_card")
    variants = [v for p in db["products"].values() for v in p["variants"].values()]
    assert len(variants) > 100 and {True, False} == {v["available"] for v in variants}
    assert all(v["options"] and v["price"] > 0 for v in variants)
    for order in db["orders"].values():  # every order belongs to its user and is paid
        assert order["order_id"] in db["users"][order["user_id"]]["orders"]
        assert order["payment_history"][0]["transaction_type"] == "payment"


def test_splits_sizes_ids_and_task_kinds(tasks):
    assert len(tasks["train"]) >= 500 and len(tasks["val"]) >= 100 and len(tasks["test"]) >= 100
    every = all_tasks(tasks)
    assert len({t.id for t in every}) == len(every)
    refusals = [t for t in every if not t.actions and not t.outputs]
    assert len(refusals) >= 50
    assert sum(bool(t.outputs) for t in every) >= 50
    assert sum(len(t.actions) == 2 for t in every) >= 20  # two requests in one conversation
    for s in SPLITS:  # each split has writes of every kind
        names = {a.name for t in tasks[s] for a in t.actions}
        assert names == set(RETAIL.write_tools), s
    for t in every:
        assert t.request and t.known_info["name"] in t.instruction
        assert "name" in t.known_info and ("email" in t.known_info or "zip" in t.known_info)


def test_gold_actions_score_one_on_every_task(db, tasks):
    for task in all_tasks(tasks):
        initial = customer_slice(db, task.user_id)
        final = json.loads(json.dumps(initial))
        act(final, task.actions)
        scores = reward(RETAIL, initial, final, task, said(task))
        assert scores == {"reward": 1.0, "r_actions": 1.0, "r_outputs": 1.0}, task.id
        if task.actions:
            assert hash_db(final) != hash_db(initial), f"{task.id}: gold writes changed nothing"


def test_gold_actions_on_the_full_database(db, tasks):
    sample = [t for s in SPLITS for t in tasks[s][:4]] + [t for t in tasks["test"] if len(t.actions) == 2][:2]
    for task in sample:
        final = json.loads(json.dumps(db))
        act(final, task.actions)
        assert reward(RETAIL, db, final, task, said(task))["reward"] == 1.0, task.id


def test_missing_output_scores_zero(db, tasks):
    task = next(t for t in all_tasks(tasks) if t.outputs and t.actions)
    initial = customer_slice(db, task.user_id)
    final = json.loads(json.dumps(initial))
    act(final, task.actions)
    assert reward(RETAIL, initial, final, task, ["All done!"]) == {"reward": 0.0, "r_actions": 1.0, "r_outputs": 0.0}


def wrong_address(task: Task) -> Action:
    return Action(
        name="modify_user_address",
        kwargs={
            "user_id": task.user_id,
            "address1": "1 Wrong Way",
            "address2": "",
            "city": "Nowhere",
            "state": "NV",
            "country": "USA",
            "zip": "00000",
        },
    )


def test_one_wrong_write_scores_zero(db, tasks):
    for task in all_tasks(tasks):
        initial = customer_slice(db, task.user_id)
        final = json.loads(json.dumps(initial))
        act(final, task.actions + [wrong_address(task)])  # everything right, plus one write nobody asked for
        assert reward(RETAIL, initial, final, task, said(task))["reward"] == 0.0, task.id
    # the right kind of write with one argument wrong: the other cancel reason, or another zip
    for task in [t for t in all_tasks(tasks) if len(t.actions) == 1][:200]:
        a = task.actions[0]
        if a.name == "cancel_pending_order":
            other = {"no longer needed": "ordered by mistake", "ordered by mistake": "no longer needed"}[
                a.kwargs["reason"]
            ]
            wrong = Action(name=a.name, kwargs={**a.kwargs, "reason": other})
        elif "zip" in a.kwargs:
            wrong = Action(name=a.name, kwargs={**a.kwargs, "zip": "00000"})
        else:
            continue
        initial = customer_slice(db, task.user_id)
        final = json.loads(json.dumps(initial))
        act(final, [wrong])
        assert reward(RETAIL, initial, final, task, said(task))["reward"] == 0.0, task.id


def test_refusal_tasks_any_write_scores_zero_and_tools_refuse_the_request(db, tasks):
    refusals = [t for t in all_tasks(tasks) if not t.actions and not t.outputs]
    for task in refusals:
        initial = customer_slice(db, task.user_id)
        assert reward(RETAIL, initial, json.loads(json.dumps(initial)), task, [])["reward"] == 1.0  # refusing is right
        final = json.loads(json.dumps(initial))
        act(final, [wrong_address(task)])
        assert reward(RETAIL, initial, final, task, [])["reward"] == 0.0, task.id
        # what the customer asks for breaks a rule; the tools enforce the status rules too
        known = task.known_info
        if ";" in known["order_id"]:
            continue  # two refused requests in one conversation
        order = initial["orders"][known["order_id"]]
        probe = json.loads(json.dumps(initial))
        if "reason" in known and order["status"] == "pending":  # a reason the policy does not accept
            assert known["reason"] not in ("no longer needed", "ordered by mistake")
            request = ("cancel_pending_order", {"order_id": order["order_id"], "reason": known["reason"]})
            final = json.loads(json.dumps(initial))
            act(
                final,
                [
                    Action(
                        name="cancel_pending_order",
                        kwargs={"order_id": order["order_id"], "reason": "no longer needed"},
                    )
                ],
            )
            assert reward(RETAIL, initial, final, task, [])["reward"] == 0.0  # cancelling under another reason is wrong
        elif "reason" in known:
            request = ("cancel_pending_order", {"order_id": order["order_id"], "reason": known["reason"]})
        elif "items" in known:
            request = (
                "return_delivered_order_items",
                {
                    "order_id": order["order_id"],
                    "item_ids": [order["items"][0]["item_id"]],
                    "payment_method_id": order["payment_history"][0]["payment_method_id"],
                },
            )
        else:
            address = {k: v for k, v in wrong_address(task).kwargs.items() if k != "user_id"}
            request = ("modify_pending_order_address", {"order_id": order["order_id"], **address})
        assert call_tool(RETAIL, probe, *request).startswith("Error"), (task.id, request)
        assert hash_db(probe) == hash_db(initial)


# values of the wrong JSON type for a string argument, and for a list-of-strings argument
NOT_STRINGS = [None, 7, 3.5, True, [], ["x"], {}, {"a": 1}]
NOT_LISTS = [None, 7, "x", {}, [7], [None], [["x"]]]


def valid_calls(db, tasks) -> dict[str, dict]:
    """One accepted call per tool: reads built from a customer, writes taken from gold actions."""
    calls = {t.actions[0].name: dict(t.actions[0].kwargs) for t in all_tasks(tasks) if len(t.actions) == 1}
    user = db["users"][tasks["train"][0].user_id]
    order_id = user["orders"][0]
    calls |= {
        "find_user_id_by_email": {"email": user["email"]},
        "find_user_id_by_name_zip": {
            "first_name": user["name"]["first_name"],
            "last_name": user["name"]["last_name"],
            "zip": user["address"]["zip"],
        },
        "get_user_details": {"user_id": user["user_id"]},
        "get_order_details": {"order_id": order_id},
        "get_product_details": {"product_id": db["orders"][order_id]["items"][0]["product_id"]},
        "list_all_product_types": {},
        "transfer_to_human_agents": {"summary": "wants a refund for a lost parcel"},
    }
    return calls


def test_every_tool_returns_an_error_for_bad_arguments_and_changes_nothing(db, tasks):
    calls = valid_calls(db, tasks)
    assert set(calls) == set(RETAIL.tools)
    state = json.loads(json.dumps(db))
    before = hash_db(state)
    for name, good in calls.items():
        schema = next(s["function"]["parameters"] for s in RETAIL.tool_schemas if s["function"]["name"] == name)
        bad_calls = [{**good, "unexpected": "x"}]
        for p in good:
            bad_calls.append({k: v for k, v in good.items() if k != p})  # missing
            is_list = schema["properties"][p]["type"] == "array"
            bad_calls += [{**good, p: v} for v in (NOT_LISTS if is_list else NOT_STRINGS)]
            if p.endswith("_id") or p in ("email", "reason"):
                bad_calls += [{**good, p: v} for v in ("", "nonexistent", "#W0000000", "gift_card_0000000")]
            if p.endswith("_ids"):
                bad_calls += [{**good, p: ["0000000000"]}, {**good, p: good[p] * 2}]
        for kwargs in bad_calls:
            result = call_tool(RETAIL, state, name, kwargs)
            assert result.startswith("Error"), (name, kwargs, result[:200])
        assert not call_tool(RETAIL, json.loads(json.dumps(db)), name, good).startswith("Error"), name
    assert call_tool(RETAIL, state, "drop_database", {}).startswith("Error: unknown tool")
    assert hash_db(state) == before


def test_write_tools_move_money_and_status(db):
    state = json.loads(json.dumps(db))
    tools = RETAIL.tools
    # cancelling an order paid by gift card puts the money back on the card at once
    order = next(
        o
        for o in state["orders"].values()
        if o["status"] == "pending" and o["payment_history"][0]["payment_method_id"].startswith("gift_card")
    )
    card = state["users"][order["user_id"]]["payment_methods"][order["payment_history"][0]["payment_method_id"]]
    balance, total = card["balance"], order["payment_history"][0]["amount"]
    tools["cancel_pending_order"](state, order_id=order["order_id"], reason="ordered by mistake")
    assert order["status"] == "cancelled" and card["balance"] == round(balance + total, 2)
    assert call_tool(
        RETAIL, state, "cancel_pending_order", {"order_id": order["order_id"], "reason": "ordered by mistake"}
    ).startswith("Error")
    # a return of delivered items records the items and refund method; a second one is refused
    order = next(o for o in state["orders"].values() if o["status"] == "delivered")
    pm = order["payment_history"][0]["payment_method_id"]
    ids = [i["item_id"] for i in order["items"]][::-1]
    tools["return_delivered_order_items"](state, order_id=order["order_id"], item_ids=ids, payment_method_id=pm)
    assert order["status"] == "return requested" and order["return_items"] == sorted(ids)
    assert call_tool(
        RETAIL,
        state,
        "exchange_delivered_order_items",
        {"order_id": order["order_id"], "item_ids": ids[:1], "new_item_ids": ids[:1], "payment_method_id": pm},
    ).startswith("Error")
    # an unavailable variant cannot be swapped in
    order = next(o for o in state["orders"].values() if o["status"] == "pending")
    line = order["items"][0]
    gone = [
        i
        for i, v in state["products"][line["product_id"]]["variants"].items()
        if not v["available"] and i != line["item_id"]
    ]
    if gone:
        result = call_tool(
            RETAIL,
            state,
            "modify_pending_order_items",
            {
                "order_id": order["order_id"],
                "item_ids": [line["item_id"]],
                "new_item_ids": gone[:1],
                "payment_method_id": order["payment_history"][0]["payment_method_id"],
            },
        )
        assert "not available" in result


def test_cancelling_after_a_payment_change_refunds_each_method_what_it_still_paid(db):
    # A gift-card order moves to the customer's other payment method, then is cancelled: the gift card was
    # refunded by the change and must not be refunded again (its balance gains the order's amount once); the
    # new method gets its payment back.
    state = json.loads(json.dumps(db))
    tools = RETAIL.tools
    order = next(
        o
        for o in state["orders"].values()
        if o["status"] == "pending"
        and o["payment_history"][0]["payment_method_id"].startswith("gift_card")
        and len(state["users"][o["user_id"]]["payment_methods"]) > 1
    )
    paid = order["payment_history"][0]
    methods = state["users"][order["user_id"]]["payment_methods"]
    card = methods[paid["payment_method_id"]]
    other = next(m for m in methods.values() if m["id"] != card["id"] and m["source"] != "gift_card")
    balance = card["balance"]
    tools["modify_pending_order_payment"](state, order_id=order["order_id"], payment_method_id=other["id"])
    tools["cancel_pending_order"](state, order_id=order["order_id"], reason="no longer needed")
    assert card["balance"] == round(balance + paid["amount"], 2)
    refunds = [
        (p["payment_method_id"], p["amount"]) for p in order["payment_history"] if p["transaction_type"] == "refund"
    ]
    assert refunds == [(card["id"], paid["amount"]), (other["id"], paid["amount"])]


def test_schemas_describe_exactly_the_tools():
    by_name = {s["function"]["name"]: s["function"] for s in RETAIL.tool_schemas}
    assert set(by_name) == set(RETAIL.tools)
    for name, fn in RETAIL.tools.items():
        params = [p for p in inspect.signature(fn).parameters if p != "db"]
        assert by_name[name]["parameters"]["required"] == params
        assert set(by_name[name]["parameters"]["properties"]) == set(params)
    assert RETAIL.write_tools < set(RETAIL.tools) and "transfer_to_human_agents" in RETAIL.terminal_tools


def test_load_environment_gives_scenarios_and_checks_options():
    env = load_environment("retail", seed=0, max_turns=12)
    assert isinstance(env, CustomerServiceEnv) and env.name == "retail"
    assert [len(env.scenarios(s)) for s in SPLITS] == [600, 100, 100]
    scenario = env.scenarios("val")[0]
    assert scenario.split == "val" and Task.model_validate(scenario.data["task"]).id == scenario.id
    assert env.tools() == RETAIL.tool_schemas
    assert "authenticate" in RETAIL.policy.lower() or "identify" in RETAIL.policy.lower()
    with pytest.raises(ValueError, match="max_turn"):
        load_environment("retail", max_turn=5)  # a typo fails loud
    with pytest.raises(ValueError, match="unknown split"):
        env.scenarios("dev")


def test_argument_credit_counts_each_gold_argument_and_list_overlap():
    from art_core.envs.customer_service.domain import argument_credit

    gold = {"order_id": "#W1", "item_ids": ["a", "b"], "payment_method_id": "paypal_1"}
    assert argument_credit(gold, gold) == 1.0
    assert argument_credit(gold, {**gold, "item_ids": ["b", "a"]}) == 1.0  # item order does not matter
    assert argument_credit(gold, {**gold, "item_ids": ["a"]}) == pytest.approx((1 + 0.5 + 1) / 3)
    assert argument_credit(gold, {**gold, "item_ids": ["a", "c"]}) == pytest.approx((1 + 1 / 3 + 1) / 3)
    assert argument_credit(gold, {"order_id": "#W1", "user_id": "u"}) == pytest.approx(1 / 3)  # extras not counted
    assert argument_credit(gold, None) == 0.0  # the model's JSON did not parse
    passengers = {"passengers": [{"first_name": "Ana", "dob": "1990-01-01"}]}
    assert argument_credit(passengers, {"passengers": [{"dob": "1990-01-01", "first_name": "Ana"}]}) == 1.0
