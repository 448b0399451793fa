"""The airline domain: seeded database and tasks, tools' effects and errors, gold replay and the reward.

Most checks run on a customer's slice of the database (their profile, their reservations and the
flights the task touches): the tools of a task never reach beyond it, so the reward on the slice is
the reward on the whole database, at a fraction of the copying and hashing. A sample checks that on
the full database too. Whole episodes run against the fake chat server of conftest.py (a scripted agent
with the scripted user), and `test_airline_episode_against_vllm` against the vLLM server (marker `vllm`).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json

import pytest

from art_core.envs import load_environment
from art_core.envs.airline import AIRLINE
from art_core.envs.airline.db import BAG_PRICE, CABINS, INSURANCE_PRICE, MONTH, TODAY, make_db
from art_core.envs.airline.scenarios import make_tasks
from art_core.envs.customer_service.domain import Action, Task, call_tool, hash_db, reward
from art_core.trajectories import Trajectory
from tests.envs.conftest import say, tool_call  # scripted agent turns for the fake chat server

SPLITS = ("train", "val", "test")


@pytest.fixture(scope="module")
def db():
    return make_db(0)


@pytest.fixture(scope="module")
def tasks(db):
    return make_tasks(db, 0)


def all_tasks(tasks) -> list[Task]:
    return [t for s in SPLITS for t in tasks[s]]


def kind(task: Task) -> str:
    return task.id.split("-", 2)[2]


def customer_slice(db, task: Task) -> dict:
    """A JSON copy of what the task can touch: the user, their reservations, the flights involved."""
    user = db["users"][task.user_id]
    reservations = {r: db["reservations"][r] for r in user["reservations"]}
    flights = {s["flight_number"] for r in reservations.values() for s in r["flights"]}
    flights |= {leg["flight_number"] for a in task.actions for leg in a.kwargs.get("flights", [])}
    part = {
        "now": db["now"],
        "counters": db["counters"],
        "airports": db["airports"],
        "flights": {n: db["flights"][n] for n in sorted(flights)},
        "users": {task.user_id: user},
        "reservations": reservations,
    }
    return json.loads(json.dumps(part))


def act(db, actions: list[Action]) -> None:
    """Play actions the way an agent does (through call_tool); every one must succeed."""
    for a in actions:
        result = call_tool(AIRLINE, db, a.name, json.loads(json.dumps(a.kwargs)))
        assert not result.startswith("Error"), f"{a} failed: {result}"


def said(task: Task) -> list[str]:
    return [f"That comes to ${o} in total." for o in task.outputs]


def test_db_is_seeded_fast_and_complete(db):
    import time

    start = time.perf_counter()
    make_db(3)
    assert time.perf_counter() - start < 1.0
    assert len(db["airports"]) == 15 and db["now"].startswith(TODAY)
    statuses = {e["status"] for f in db["flights"].values() for e in f["dates"].values()}
    assert statuses == {"available", "landed", "cancelled", "delayed", "on time"}
    assert all(set(f["dates"]) == set(MONTH) for f in db["flights"].values())
    assert {u["membership"] for u in db["users"].values()} == {"regular", "silver", "gold"}
    sources = {m["source"] for u in db["users"].values() for m in u["payment_methods"].values()}
    assert sources == {"credit_card", "gift_card", "certificate"}
    res = list(db["reservations"].values())
    assert {r["flight_type"] for r in res} == {"one_way", "round_trip"} and {r["cabin"] for r in res} == set(CABINS)
    assert any(len(r["flights"]) >= 3 for r in res) and {r["insurance"] for r in res} == {"yes", "no"}
    for r in res:  # every reservation belongs to its user, is paid in full and its legs connect
        assert r["reservation_id"] in db["users"][r["user_id"]]["reservations"]
        legs = r["flights"]
        assert all(a["destination"] == b["origin"] for a, b in zip(legs, legs[1:]) if a["date"] == b["date"])
        fare = sum(s["price"] for s in legs) * len(r["passengers"])
        extras = BAG_PRICE * r["nonfree_baggages"] + (
            INSURANCE_PRICE * len(r["passengers"]) if r["insurance"] == "yes" else 0
        )
        assert sum(p["amount"] for p in r["payment_history"]) == fare + extras


def test_same_seed_same_db_and_tasks_other_seed_differs(db, tasks):
    dump = lambda ts: json.dumps({s: [t.model_dump() for t in ts[s]] for s in SPLITS}, sort_keys=True)  # noqa: E731
    assert hash_db(make_db(0)) == hash_db(db)
    assert hash_db(make_db(1)) != hash_db(db)
    before = hash_db(db)
    assert dump(make_tasks(make_db(0), 0)) == dump(tasks)
    assert dump(make_tasks(make_db(1), 1)) != dump(tasks)
    assert dump(make_tasks(db, 1)) != dump(tasks)  # the task seed alone changes them too
    assert hash_db(db) == before  # making tasks never writes to the database it reads


def test_splits_sizes_ids_and_kinds(tasks):
    assert [len(tasks[s]) >= n for s, n in zip(SPLITS, (500, 100, 100))] == [True] * 3
    every = all_tasks(tasks)
    assert len({t.id for t in every}) == len(every)
    refusals = [t for t in every if kind(t).startswith("refuse_")]
    assert len(refusals) >= 100 and all(not t.actions and not t.outputs for t in refusals)
    assert {kind(t) for t in refusals} == {
        "refuse_change_basic",
        "refuse_cancel",
        "refuse_compensation",
        "refuse_cancel_departed",
    }
    assert sum(bool(t.outputs) for t in every) >= 80 and sum(bool(t.outputs and t.actions) for t in every) >= 40
    for s in SPLITS:  # each split asks for every kind of write
        assert {a.name for t in tasks[s] for a in t.actions} == set(AIRLINE.write_tools), s
    for t in every:
        assert t.request and t.user_id in t.instruction and t.known_info["user_id"] == t.user_id
        assert all(isinstance(v, str) and v for v in t.known_info.values())


def test_gold_actions_score_one_on_every_task(db, tasks):
    for task in all_tasks(tasks):
        initial = customer_slice(db, task)
        final = json.loads(json.dumps(initial))
        act(final, task.actions)
        assert reward(AIRLINE, initial, final, task, said(task)) == {
            "reward": 1.0,
            "r_actions": 1.0,
            "r_outputs": 1.0,
        }, task.id
        if task.actions:
            assert hash_db(final) != hash_db(initial), f"{task.id}: gold writes changed nothing"


def test_gold_actions_on_the_full_database(db, tasks):
    sample = [t for s in SPLITS for t in tasks[s][:3]] + [
        next(t for t in all_tasks(tasks) if kind(t) == k) for k in ("book_onestop", "cancel")
    ]
    for task in sample:
        final = json.loads(json.dumps(db))
        act(final, task.actions)
        assert reward(AIRLINE, db, final, task, said(task))["reward"] == 1.0, task.id


def test_missing_output_scores_zero(db, tasks):
    task = next(t for t in all_tasks(tasks) if t.outputs and t.actions)
    initial = customer_slice(db, task)
    final = json.loads(json.dumps(initial))
    act(final, task.actions)
    assert reward(AIRLINE, initial, final, task, ["All done, have a nice flight!"]) == {
        "reward": 0.0,
        "r_actions": 1.0,
        "r_outputs": 0.0,
    }


def one_wrong(a: Action, initial: dict) -> Action:
    """The same kind of write with one thing wrong."""
    kw = json.loads(json.dumps(a.kwargs))
    if a.name == "send_certificate":
        kw["amount"] += 50
    elif a.name == "update_reservation_baggages":
        kw["total_baggages"] += 1
    elif a.name in ("book_reservation", "update_reservation_passengers"):
        kw["passengers"][0]["first_name"] += "x"
    elif a.name == "update_reservation_flights":
        kw["cabin"] = next(c for c in CABINS if c != kw["cabin"])
    elif a.name == "cancel_reservation":  # another of the customer's reservations, else a stray certificate
        res = initial["reservations"][kw["reservation_id"]]
        others = [
            r
            for r in initial["users"][res["user_id"]]["reservations"]
            if r != kw["reservation_id"] and initial["reservations"][r]["status"] == "active"
        ]
        if others:
            return Action(name=a.name, kwargs={"reservation_id": others[0]})
        return Action(name="send_certificate", kwargs={"user_id": res["user_id"], "amount": 100})
    return Action(name=a.name, kwargs=kw)


def test_one_wrong_write_scores_zero(db, tasks):
    extra = lambda t: Action(name="send_certificate", kwargs={"user_id": t.user_id, "amount": 10})  # noqa: E731
    writes = [t for t in all_tasks(tasks) if t.actions]
    accepted = 0
    for task in writes:
        initial = customer_slice(db, task)
        final = json.loads(json.dumps(initial))
        act(final, task.actions + [extra(task)])  # everything right, plus a write nobody asked for
        assert reward(AIRLINE, initial, final, task, said(task))["reward"] == 0.0, task.id
        wrong = json.loads(json.dumps(initial))
        for a in task.actions:  # the right write with one argument wrong (if the tools refuse it, nothing changes)
            bad = one_wrong(a, initial)
            accepted += not call_tool(AIRLINE, wrong, bad.name, bad.kwargs).startswith("Error")
        assert reward(AIRLINE, initial, wrong, task, said(task))["reward"] == 0.0, task.id
    assert accepted >= 0.7 * len(writes)  # mostly a real, accepted wrong write, not a refused call


def test_refusal_tasks_any_write_scores_zero(db, tasks):
    refusals = [t for t in all_tasks(tasks) if kind(t).startswith("refuse_")]
    for task in refusals:
        initial = customer_slice(db, task)
        assert (
            reward(AIRLINE, initial, json.loads(json.dumps(initial)), task, [])["reward"] == 1.0
        )  # declining is right
        rid = task.known_info["reservation_id"]
        # what the customer asks for: the tools do it (they check data, not policy), and the reward says 0
        asked = Action(name="cancel_reservation", kwargs={"reservation_id": rid})
        if kind(task) == "refuse_compensation":
            asked = Action(name="send_certificate", kwargs={"user_id": task.user_id, "amount": 50})
        elif kind(task) == "refuse_change_basic":
            legs = initial["reservations"][rid]["flights"]
            moved = [
                {
                    "flight_number": s["flight_number"],
                    "date": task.known_info["new_date"] if s["date"] == legs[-1]["date"] else s["date"],
                }
                for s in legs
            ]
            card = next(
                m for m, v in initial["users"][task.user_id]["payment_methods"].items() if v["source"] == "credit_card"
            )
            asked = Action(
                name="update_reservation_flights",
                kwargs={"reservation_id": rid, "cabin": "basic_economy", "flights": moved, "payment_id": card},
            )
        final = json.loads(json.dumps(initial))
        if call_tool(AIRLINE, final, asked.name, asked.kwargs).startswith("Error"):  # e.g. the new date is sold out
            act(final, [Action(name="cancel_reservation", kwargs={"reservation_id": rid})])
        assert reward(AIRLINE, initial, final, task, [])["reward"] == 0.0, task.id


BAD_VALUES = [None, 7, 3.5, True, [], {}, ["x"], {"a": 1}, "", "nonexistent", "2025-13-45"]


def test_every_tool_returns_an_error_for_bad_arguments_and_changes_nothing(db, tasks):
    task = next(
        t
        for t in all_tasks(tasks)
        if kind(t) == "add_bags" and db["reservations"][t.known_info["reservation_id"]]["total_baggages"]
    )
    base = customer_slice(db, task)
    before = hash_db(base)
    for name, fn in AIRLINE.tools.items():
        params = [p for p in inspect.signature(fn).parameters if p != "db"]
        cases = [{}, {p: "x" for p in params + ["unexpected"]}]
        cases += [{**{q: "x" for q in params}, p: bad} for p in params for bad in BAD_VALUES]
        for kwargs in cases:
            result = call_tool(AIRLINE, base, name, kwargs)
            assert isinstance(result, str)
            free_text = (
                name == "transfer_to_human_agents" and isinstance(kwargs.get("summary"), str) and kwargs["summary"]
            )
            arithmetic = name == "calculate" and set(kwargs) == {"expression"} and kwargs["expression"] == "2025-13-45"
            if params and kwargs != {p: "x" for p in params} and not free_text and not arithmetic:
                assert result.startswith("Error"), (name, kwargs, result[:200])
    # well-formed calls that the data refuses, each with a message that says what is wrong
    rid = task.known_info["reservation_id"]
    res = base["reservations"][rid]
    card = next(m for m, v in base["users"][task.user_id]["payment_methods"].items() if v["source"] == "credit_card")
    refused = {
        "only be added": (
            "update_reservation_baggages",
            {"reservation_id": rid, "total_baggages": 0, "nonfree_baggages": 0, "payment_id": card},
        ),
        "exactly": ("update_reservation_passengers", {"reservation_id": rid, "passengers": res["passengers"] * 2}),
        "not in the profile": (
            "update_reservation_flights",
            {"reservation_id": rid, "cabin": res["cabin"], "flights": res["flights"], "payment_id": "gift_card_0"},
        ),
        "June 2025": ("search_direct_flight", {"origin": "ATL", "destination": "BOS", "date": "tomorrow"}),
        "unknown airport": ("search_onestop_flight", {"origin": "XXX", "destination": "BOS", "date": MONTH[20]}),
    }
    for expected, (name, kwargs) in refused.items():
        result = call_tool(AIRLINE, base, name, kwargs)
        assert result.startswith("Error") and expected in result, (name, result)
    assert call_tool(AIRLINE, base, "drop_database", {}).startswith("Error: unknown tool")
    assert hash_db(base) == before


def test_write_tools_move_money_seats_and_ids(db):
    state = json.loads(json.dumps(db))
    tools = AIRLINE.tools
    user = next(
        u
        for u in state["users"].values()
        if any(m["source"] == "gift_card" and m["amount"] >= 300 for m in u["payment_methods"].values())
    )
    gift = next(m for m, v in user["payment_methods"].items() if v["source"] == "gift_card" and v["amount"] >= 300)
    offers = [
        o
        for a in ("ATL", "BOS", "DEN", "DFW")
        for b in state["airports"]
        for d in MONTH[20:24]
        if a != b
        for o in tools["search_direct_flight"](state, a, b, d)
        if o["available_seats"]["basic_economy"] >= 2
    ]
    offer = min(offers, key=lambda o: o["prices"]["basic_economy"])
    price, seats, balance = (
        offer["prices"]["basic_economy"],
        offer["available_seats"]["basic_economy"],
        user["payment_methods"][gift]["amount"],
    )
    me = dict(user["name"], dob=user["dob"])
    booking = dict(
        user_id=user["user_id"],
        origin=offer["origin"],
        destination=offer["destination"],
        flight_type="one_way",
        cabin="basic_economy",
        flights=[{"flight_number": offer["flight_number"], "date": offer["date"]}],
        passengers=[me],
        payment_methods=[{"payment_id": gift, "amount": price + INSURANCE_PRICE}],
        total_baggages=0,
        nonfree_baggages=0,
        insurance="yes",
    )
    first = tools["book_reservation"](state, **json.loads(json.dumps(booking)))
    second = tools["book_reservation"](state, **json.loads(json.dumps(booking)))
    assert (first["reservation_id"], second["reservation_id"]) == ("Z00001", "Z00002")  # deterministic new ids
    assert first["created_at"] == state["now"] and first["reservation_id"] in user["reservations"]
    entry = state["flights"][offer["flight_number"]]["dates"][offer["date"]]
    assert entry["seats"][0] == seats - 2 and user["payment_methods"][gift]["amount"] == balance - 2 * (
        price + INSURANCE_PRICE
    )
    # cancelling gives the gift card its money back at once and frees the seat
    tools["cancel_reservation"](state, reservation_id="Z00002")
    assert state["reservations"]["Z00002"]["payment_history"][-1] == {
        "payment_id": gift,
        "amount": -(price + INSURANCE_PRICE),
    }
    assert (
        user["payment_methods"][gift]["amount"] == balance - (price + INSURANCE_PRICE)
        and entry["seats"][0] == seats - 1
    )
    assert (
        call_tool(AIRLINE, state, "cancel_reservation", {"reservation_id": "Z00002"})
        == "Error: reservation Z00002 is already cancelled"
    )
    # payments that do not add up are refused, and nothing changes
    before = hash_db(state)
    wrong = dict(booking, payment_methods=[{"payment_id": gift, "amount": price}])
    assert "costs $" in call_tool(AIRLINE, state, "book_reservation", wrong) and hash_db(state) == before
    # certificates get ids from a counter
    assert "certificate_9000001" in tools["send_certificate"](state, user_id=user["user_id"], amount=100)
    assert user["payment_methods"]["certificate_9000001"] == {"source": "certificate", "amount": 100}


def test_schemas_describe_exactly_the_tools_and_policy_states_the_prices():
    by_name = {s["function"]["name"]: s["function"] for s in AIRLINE.tool_schemas}
    assert set(by_name) == set(AIRLINE.tools)
    for name, fn in AIRLINE.tools.items():
        params = [p for p in inspect.signature(fn).parameters if p != "db"]
        assert by_name[name]["parameters"]["required"] == params and set(
            by_name[name]["parameters"]["properties"]
        ) == set(params)
    assert AIRLINE.write_tools < set(AIRLINE.tools) and "transfer_to_human_agents" in AIRLINE.terminal_tools
    assert f"${INSURANCE_PRICE} per passenger" in AIRLINE.policy and f"${BAG_PRICE}" in AIRLINE.policy


def test_load_environment_gives_scenarios():
    env = load_environment("airline", seed=0, max_turns=12)
    assert env.name == "airline" and env.tools() == AIRLINE.tool_schemas
    assert [len(env.scenarios(s)) for s in SPLITS] == [520, 100, 100]
    scenario = env.scenarios("test")[0]
    assert scenario.split == "test" and Task.model_validate(scenario.data["task"]).id == scenario.id


def compact(domain):
    """The domain for the tiny test model, whose context is 4096 tokens of a 4k-word tokenizer: a one-line
    policy and schemas without descriptions (the full policy and schemas take about 4k tokens)."""
    schemas = copy.deepcopy(domain.tool_schemas)
    for s in schemas:
        s["function"].pop("description", None)
        for p in s["function"]["parameters"]["properties"].values():
            p.pop("description", None)
    return dataclasses.replace(
        domain,
        policy="You are the airline's agent: identify the customer, confirm before changes.",
        tool_schemas=schemas,
    )


@pytest.mark.vllm
async def test_airline_episode_against_vllm(vllm_endpoint):
    from openai import AsyncOpenAI

    from art_core.envs.customer_service.env import CustomerServiceEnv

    env = CustomerServiceEnv(compact(AIRLINE), seed=0, user="scripted", max_turns=3, force_tool_calls=True)
    client = AsyncOpenAI(base_url=vllm_endpoint.base_url, api_key=vllm_endpoint.api_key)
    scenario = env.scenarios("val")[0]
    traj = await env.rollout(client, vllm_endpoint.model, scenario, temperature=1.0, max_tokens=256)
    assert isinstance(traj, Trajectory) and traj.metadata["task_id"] == scenario.id
    choices = traj.choices()
    # a call cut off by max_tokens counts as a plain reply to the customer, so only most turns are calls
    assert 1 <= len(choices) == traj.metrics["turns"] <= 3 and traj.metrics["tool_calls"] >= 1
    assert all(c.logprobs.content and c.logprobs.content[0].token.startswith("token_id:") for c in choices)
    assert traj.reward in (0.0, 1.0) and "r_actions" in traj.metrics


def gold_agent_turns(task: Task) -> list[dict]:
    """A scripted agent that does the task right: identify, propose each write and wait for yes, make it,
    then state the outputs (or decline, on a refusal task)."""
    turns = [say("Could you tell me your user id?"), tool_call("get_user_details", {"user_id": task.user_id})]
    for a in task.actions:
        turns += [say(f"Please confirm (yes/no): {a.name} {json.dumps(a.kwargs)}"), tool_call(a.name, a.kwargs)]
    if kind(task).startswith("refuse_"):
        return turns + [say("I am sorry, that is not allowed under our policy, so I cannot do it.")]
    return turns + [say(" ".join(f"The amount is ${o}." for o in task.outputs) or "All done.")]


async def test_episodes_with_the_scripted_user_score_a_right_agent_one_and_a_rule_breaker_zero(tasks, fake_chat_server):
    from openai import AsyncOpenAI

    env = load_environment("airline", seed=0, user="scripted", max_turns=12)
    client = AsyncOpenAI(base_url=fake_chat_server.base_url, api_key="fake", max_retries=0)
    one_per_kind = {kind(t): t for t in reversed(all_tasks(tasks))}
    for k, task in sorted(one_per_kind.items()):
        fake_chat_server.script(k, gold_agent_turns(task))
        scenario = next(s for s in env.scenarios(task.id.split("-")[0]) if s.id == task.id)
        traj = await env.rollout(client, k, scenario, temperature=0.0)
        assert traj.metadata["stop_reason"] == "user_stop" and traj.reward == 1.0, (
            task.id,
            traj.metrics,
            traj.messages()[-3:],
        )
        assert traj.metrics["writes"] == len(task.actions) and traj.metrics["tool_errors"] == 0
    # on a refusal task, doing what the customer asks anyway (no confirmation needed to break a rule) scores 0
    task = one_per_kind["refuse_cancel"]
    rid = task.known_info["reservation_id"]
    fake_chat_server.script(
        "breaker",
        [tool_call("cancel_reservation", {"reservation_id": rid}), say("Done; I cannot help with anything else.")],
    )
    scenario = next(s for s in env.scenarios(task.id.split("-")[0]) if s.id == task.id)
    traj = await env.rollout(client, "breaker", scenario)
    assert traj.metrics["writes"] == 1 and traj.reward == 0.0 and traj.metrics["r_actions"] == 0.0
