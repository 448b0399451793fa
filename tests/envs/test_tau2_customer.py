"""The scripted tau2 customer: it speaks from its task's user scenario only, agrees only to the gold writes, and
ends the conversation the way tau2's customer does. Skipped where tau2's data (the `[tau2]` extra) is absent."""

from __future__ import annotations

import pytest

from art_core.envs.tau2.customer import ScenarioLeak, ScriptedTau2User, first_person, leaks
from art_core.envs.tau2.user import GREETING, STOP_SIGNALS

data = pytest.importorskip("art_core.envs.tau2.data")


@pytest.fixture(scope="module")
def retail():
    try:
        return data.load_tau2_data("retail")
    except data.Tau2DataMissing:
        pytest.skip("tau2 retail data not installed")


def customer(retail, task_id: str) -> ScriptedTau2User:
    from art_core.envs.tau2.retail import WRITE_TOOLS

    return ScriptedTau2User(retail.tasks[task_id], WRITE_TOOLS)


def test_it_opens_with_the_reason_for_call_and_identifies_itself_from_known_info(retail):
    user = customer(retail, "0")
    opening = user.respond(GREETING)
    assert opening.startswith("I received my order #W2378156 and wish to exchange the mechanical keyboard")
    reply = user.respond("Could you tell me your email address, or your name and zip code?")
    assert "Yusuf Rossi" in reply and "19122" in reply and "do not remember my email" in reply
    assert not any(s in reply for s in STOP_SIGNALS)


def test_it_agrees_only_to_the_gold_write_then_stops(retail):
    user = customer(retail, "0")
    user.respond(GREETING)
    wrong = (
        "I will exchange items 1151293680 for 7706410293 in order #W2378156 with credit_card_9513926. Shall I proceed?"
    )
    assert user.respond(wrong).startswith("No")  # the thermostat is missing from this proposal
    right = (
        "I will exchange in order #W2378156 items 1151293680 and 4983901480 for 7706410293 and 7747408585, "
        "paying with credit_card_9513926. Shall I proceed? (yes/no)"
    )
    assert user.respond(right) == "Yes, please go ahead."
    assert "###STOP###" in user.respond("Done: the exchange is requested.")


def test_a_refusal_task_ends_when_the_agent_declines_and_a_transfer_with_transfer(retail):
    from art_core.envs.tau2.airline import WRITE_TOOLS

    airline = data.load_tau2_data("airline")
    user = ScriptedTau2User(airline.tasks["0"], WRITE_TOOLS)  # cancellation not allowed: nothing may change
    user.respond(GREETING)
    assert "###STOP###" in user.respond("I'm sorry, but I cannot cancel reservation EHGLP3 under our policy.")
    user = customer(retail, "0")
    user.respond(GREETING)
    assert user.respond("YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON.") == "###TRANSFER###"


def test_every_reply_on_every_train_task_holds_only_scenario_values(retail):
    from art_core.envs.tau2.retail import WRITE_TOOLS

    probes = [
        GREETING,
        "Could you tell me your email, name, zip code and user id?",
        "Which payment method would you like to use?",
        "Could you give me the order id and your address?",
        "Here is the plan. Shall I proceed? (yes/no)",
    ]
    for task_id in retail.splits["train"]:
        user = ScriptedTau2User(retail.tasks[task_id], WRITE_TOOLS)
        for probe in probes:
            user.respond(probe)  # raises ScenarioLeak on a value its scenario does not give


def test_a_planted_value_the_scenario_does_not_give_is_refused(retail):
    user = customer(retail, "0")
    user.respond(GREETING)
    user.known += " My email is yusuf.rossi7301@example.com."  # true in the database, absent from the scenario
    with pytest.raises(ScenarioLeak, match="yusuf.rossi7301@example.com"):
        user.respond("What is your email address?")
    assert leaks("Order #W2378156, zip 19122.", "order #W2378156 in zip code 19122") == []


def test_first_person():
    assert first_person("You're in a rush and your order is late.") == "I'm in a rush and my order is late."
