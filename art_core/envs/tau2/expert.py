"""Expert demonstrations for tau2-retail and tau2-airline, derived from each task's gold actions and played
through the real tau2 environment with the scripted customer (`customer.ScriptedTau2User`).

    python -m art_core.envs.tau2.expert --domain retail --out tau2-retail-demos.jsonl
    >>> demos = build_tau2_demonstrations("retail", limit=10)   # tau2's train split; all 74: 45 kept, in 16 s
    >>> print(demos.summary())                                 # demonstrated, and why the others were not
    tau2-retail train: 7 of 10 scenarios demonstrated (refuse 1, write 6)
      skipped 3: needs tau2's NL-assertion judge
    >>> demos.write_jsonl("demos.jsonl")       # the SFT format of `customer_service.expert`  # doctest: +SKIP

Unlike the generated domains' experts, which read only the conversation, this expert knows its task's gold
actions (tau2's scenarios are free text, with conditions no rule can read). What it may *use* is still only what
the conversation has revealed: it identifies the customer as the policy says (retail: by email, else name and
zip; airline: by user id), reads with the read tools (the gold reads that succeed, and the reads that reveal the
ids a write needs: the user's details, an order, a product, the airports, a flight search), proposes each gold
write with all its values and waits for the customer's yes, makes the write with the gold arguments, states the
task's `communicate_info`, declines where nothing may change, transfers where the gold transfers. Before each
call it checks that every value was shown by a customer message or a tool result; a task where one never is
gets skipped with that reason, and every kept conversation is checked again by `unrevealed_values`.

A demonstration is kept only if the environment's own reward scores it 1.0. Tasks whose reward needs tau2's
NL-assertion judge (an LLM) are skipped unless a judge is configured (`judge=`, or ART_JUDGE_MODEL).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
from pathlib import Path

from typing import Any

from art_core.envs.base import Scenario, Split
from art_core.envs.customer_service.expert import (
    Demonstrations,
    demonstration_row,
    replay_demonstration,
    spoken_date,
    unrevealed_values,
)
from art_core.envs.customer_service.policies import CannotDemonstrate, Play, PolicyClient, ask
from art_core.envs.tau2.customer import scenario_text
from art_core.envs.tau2.env import Tau2Env
from art_core.envs.tau2.reward import needs_judge
from art_core.envs.tool_use.tools import fresh_copy
from art_core.trajectories import Trajectory

__all__ = ["build_tau2_demonstrations", "load_tau2_env", "needs_judge", "replay_demonstration", "tau2_expert"]

CONFIRM = "Shall I proceed? (yes/no)"
TRANSFER_MESSAGE = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."  # tau2's policy wording
DECLINE = "I'm sorry, but I cannot do that: our policy does not allow it."
NO_JUDGE = "needs tau2's NL-assertion judge: an LLM, none configured"
FREE_TEXT = ("summary",)  # arguments in the agent's own words, checked for ids only


def load_tau2_env(domain: str, **options: Any) -> Tau2Env:
    """tau2-<domain> with the scripted customer, as the demonstrations are played."""
    from art_core.envs import load_environment

    return load_environment(f"tau2-{domain}", user="scripted", **options)


def _words(name: str) -> str:
    return name.replace("_", " ")


def describe(arguments: dict[str, Any]) -> str:
    """Every value of a call, in words: 'order id #W1; item ids 123 and 456; ...'."""

    def value(v: Any) -> str:
        if isinstance(v, dict):
            return ", ".join(f"{_words(k)} {value(x)}" for k, x in v.items() if x not in ("", None))
        if isinstance(v, list):
            return " and ".join(f"({value(x)})" if isinstance(x, dict) else value(x) for x in v)
        return str(v)

    return "; ".join(f"{_words(k)} {value(v)}" for k, v in arguments.items() if v not in ("", None))


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]


class Tau2Expert:
    """The expert's side of one tau2 task (see the module docstring); `policy` is what `PolicyClient` plays."""

    def __init__(self, env: Tau2Env, task: dict[str, Any]) -> None:
        self.env = env
        self.task = task
        self.domain = env.toolset.domain
        self.shadow = fresh_copy(env.data.db)  # the expert's own copy: it knows what a read will show
        self.shown = ""  # what the customer and the tools said, lowercased
        self.everything = ""  # ... and what the expert said
        self.done: set[str] = set()  # calls made, as JSON
        self.enums = {str(v).lower() for s in env.tools() for v in _enum_values(s)}

    # ---- what the conversation has shown ----

    def hear(self, text: str) -> str:
        self.shown += "\n" + text.lower()
        self.everything += "\n" + text.lower()
        return text

    def revealed(self, v: Any) -> bool:
        if isinstance(v, bool) or v is None or v == "":
            return True
        if isinstance(v, (int, float)):
            return any(s in self.everything for s in {str(v), f"{v:g}", f"{v:.2f}"})
        s = str(v).lower()
        return s in self.shown or s in self.enums or (spoken_date(s) or "\0") in self.shown

    def missing(self, arguments: dict[str, Any], numbers: bool = True) -> list[Any]:
        """The values not shown yet; `numbers=False` leaves out the amounts a proposal states itself."""
        strict = {k: v for k, v in arguments.items() if k not in FREE_TEXT}
        leaves = [v for v in _leaves(strict) if numbers or isinstance(v, str)]
        return [v for v in leaves if not self.revealed(v)]

    # ---- turns ----

    def say(self, text: str) -> Play:
        self.everything += "\n" + text.lower()
        return self.hear((yield from ask(text)))

    def call(self, name: str, arguments: dict[str, Any]) -> Play:
        from art_core.envs.customer_service.policies import Call

        self.done.add(json.dumps([name, arguments], sort_keys=True))
        self.env.call_tool(self.shadow, name, arguments)
        text = yield Call(name, arguments)
        if text.startswith("Error:"):
            raise CannotDemonstrate(f"{name} refused: {text}")
        return self.hear(text)

    def _try(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        # a read leaves the database as it was: only a write needs a scratch copy
        db = fresh_copy(self.shadow) if name in self.env.toolset.write_tools else self.shadow
        return self.env.call_tool(db, name, arguments)

    def would_fail(self, name: str, arguments: dict[str, Any]) -> bool:
        return self._try(name, arguments)[1]

    def peek(self, name: str, arguments: dict[str, Any]) -> str:
        return self._try(name, arguments)[0].lower()

    # ---- the conversation ----

    def policy(self, opening: str) -> Play:
        self.hear(opening)
        actions = (self.task.get("evaluation_criteria") or {}).get("actions") or []
        writes = [a for a in actions if a["name"] in self.env.toolset.write_tools]
        user_id = self.user_id(actions)
        yield from self.identify(user_id)
        stated = False
        for a in actions:
            name, arguments = a["name"], a.get("arguments") or {}
            if json.dumps([name, arguments], sort_keys=True) in self.done or name == "calculate":
                continue  # a repeated read shows nothing new; arithmetic the expert states itself
            if self.would_fail(name, arguments):
                continue  # tau2 skips failing gold actions too (lookups that fail on purpose, task 64's exchange)
            if name == "transfer_to_human_agents":
                yield from self.call(name, arguments)
                yield from self.say(TRANSFER_MESSAGE)
                return
            if name in self.env.toolset.write_tools:
                if not stated:
                    stated = yield from self.state_outputs()
                yield from self.write(name, arguments, user_id)
            elif self.missing(arguments):
                yield from self.reveal(arguments)
                if not self.missing(arguments):
                    yield from self.call(name, arguments)
            else:
                yield from self.call(name, arguments)
        if not stated:
            stated = yield from self.state_outputs()
        if not writes and not stated:
            yield from self.say(DECLINE)
        elif writes:
            yield from self.say("Is there anything else I can help you with?")

    def user_id(self, actions: list[dict[str, Any]]) -> str:
        """The customer's user id: the gold's lookups and arguments say whose task it is."""
        for a in actions:
            args = a.get("arguments") or {}
            if "user_id" in args:
                return args["user_id"]
            if a["name"].startswith("find_user_id") and not self.would_fail(a["name"], args):
                return self.peek(a["name"], args).strip('"')
            for key, table in (("order_id", "orders"), ("reservation_id", "reservations")):
                record = self.env.data.db.get(table, {}).get(args.get(key))
                if record:
                    return record["user_id"]
        users = self.env.data.db["users"]  # no action names the customer: their known_info does
        for token in re.findall(r"[a-z]+_[a-z]+_\d+", scenario_text(self.task)):
            if token in users:
                return token
        text = scenario_text(self.task).lower()
        for uid, user in users.items():  # ... or their name and zip code
            name = user.get("name") or {}
            zip_ = (user.get("address") or {}).get("zip")
            if zip_ and zip_ in text and f"{name.get('first_name', '')} {name.get('last_name', '')}".lower() in text:
                return uid
        raise CannotDemonstrate("whose task: neither the gold actions nor the scenario name the customer")

    def identify(self, user_id: str) -> Play:
        user = self.env.data.db["users"][user_id]
        if self.domain == "airline":
            yield from self.say("I can help with that. Could you tell me your user id?")
            if not self.revealed(user_id):
                raise CannotDemonstrate("identify: the customer never gave a user id")
            yield from self.call("get_user_details", {"user_id": user_id})
            return
        yield from self.say(
            "I can help with that. First I need to verify your identity: could you tell me your email address, "
            "or your first name, last name and zip code?"
        )
        name, zip_ = user["name"], user["address"]["zip"]
        by_email = {"email": user["email"]}
        by_name = {"first_name": name["first_name"], "last_name": name["last_name"], "zip": zip_}
        if not self.missing(by_email):
            yield from self.call("find_user_id_by_email", by_email)
        elif not self.missing(by_name):
            yield from self.call("find_user_id_by_name_zip", by_name)
        else:
            raise CannotDemonstrate("identify: the customer gave neither an email nor a name and zip code")

    def state_outputs(self) -> Play:
        infos = (self.task.get("evaluation_criteria") or {}).get("communicate_info") or []
        if infos:
            yield from self.say("Here is what you asked about: " + "; ".join(infos) + ".")
        return bool(infos)

    def write(self, name: str, arguments: dict[str, Any], user_id: str) -> Play:
        yield from self.reveal(arguments, user_id)
        if missing := self.missing(arguments, numbers=False):
            raise CannotDemonstrate(f"never revealed: {name} needs {missing[:3]}, which no message or read showed")
        reply = yield from self.say(f"Here is what I will do: {_words(name)}: {describe(arguments)}. {CONFIRM}")
        if not reply.lower().startswith("yes"):
            raise CannotDemonstrate(f"the customer did not agree to {name}: {reply!r}")
        yield from self.call(name, arguments)
        yield from self.say(f"Done: the {_words(name)} went through.")

    def reveal(self, arguments: dict[str, Any], user_id: str | None = None) -> Play:
        """Make the reads that show the values `arguments` still lacks (each read's own arguments shown first)."""
        reads = list(self.candidate_reads(arguments, user_id))
        wanted = set(map(str, self.missing(arguments)))
        useful = [(n, a) for n, a in reads if any(w.lower() in self.peek(n, a) for w in wanted)]
        for _, a in useful:  # what the useful reads need, shown by earlier reads
            wanted |= set(map(str, self.missing(a)))
        for n, a in reads:
            still = [w for w in wanted if not self.revealed(w)]
            if not still:
                break
            key = json.dumps([n, a], sort_keys=True)
            if key in self.done or self.missing(a) or self.would_fail(n, a):
                continue
            page = self.peek(n, a)
            if any(w.lower() in page for w in still):
                yield from self.call(n, a)

    def candidate_reads(self, arguments: dict[str, Any], user_id: str | None) -> list[tuple[str, dict[str, Any]]]:
        """Reads that may show an argument's value, cheapest and most general first."""
        db = self.env.data.db
        reads: list[tuple[str, dict[str, Any]]] = []
        uid = user_id or arguments.get("user_id")
        if uid is None:
            uid = next((r["user_id"] for r in _records(db, arguments) if "user_id" in r), None)
        if uid:
            reads.append(("get_user_details", {"user_id": uid}))
        if self.domain == "retail":
            reads.append(("list_all_product_types", {}))
            for oid in [arguments.get("order_id")] + list(db["users"].get(uid, {}).get("orders", [])):
                if oid in db["orders"]:
                    reads.append(("get_order_details", {"order_id": oid}))
            items = set(map(str, _leaves(arguments)))
            for oid in {arguments.get("order_id")} & set(db["orders"]):
                for line in db["orders"][oid]["items"]:
                    if line["item_id"] in items:
                        reads.append(("get_product_details", {"product_id": line["product_id"]}))
            if "product_id" in arguments:
                reads.append(("get_product_details", {"product_id": arguments["product_id"]}))
            return reads
        reads.append(("list_all_airports", {}))
        rid = arguments.get("reservation_id")
        if rid in db["reservations"]:
            reads.append(("get_reservation_details", {"reservation_id": rid}))
        flights = arguments.get("flights") or []
        if "origin" in arguments and "date" in arguments:  # a search's own airports: a reservation shows them
            for r in db["users"].get(uid or "", {}).get("reservations", []):
                reads.append(("get_reservation_details", {"reservation_id": r}))
        for i, leg in enumerate(flights):
            f = db["flights"].get(leg.get("flight_number"))
            if f is None:
                continue
            reads.append(
                ("search_direct_flight", {"origin": f["origin"], "destination": f["destination"], "date": leg["date"]})
            )
            nxt = flights[i + 1] if i + 1 < len(flights) else None
            g = db["flights"].get(nxt["flight_number"]) if nxt else None
            if g is not None and g["origin"] == f["destination"]:
                reads.append(
                    (
                        "search_onestop_flight",
                        {"origin": f["origin"], "destination": g["destination"], "date": leg["date"]},
                    )
                )
        return reads


def _records(db: dict[str, Any], arguments: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for key, table in (("order_id", "orders"), ("reservation_id", "reservations")):
        if arguments.get(key) in db.get(table, {}):
            out.append(db[table][arguments[key]])
    return out


def _enum_values(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return list(node.get("enum", [])) + [x for v in node.values() for x in _enum_values(v)]
    if isinstance(node, list):
        return [x for v in node for x in _enum_values(v)]
    return []


def tau2_expert(env: Tau2Env, scenario: Scenario):
    """The expert policy of one scenario (a `Policy` for `PolicyClient`). Raises `CannotDemonstrate` for a task
    whose reward needs tau2's NL-assertion judge when none is configured: its episode could not be scored."""
    task = scenario.data.get("task") or env.data.tasks[scenario.id]
    if needs_judge(task) and not has_judge(env):
        raise CannotDemonstrate(NO_JUDGE)
    return Tau2Expert(env, task).policy


def has_judge(env: Tau2Env) -> bool:
    """Whether `env` can score a task that needs the NL-assertion judge (its `judge`, or ART_JUDGE_MODEL)."""
    return env.options.judge is not None or bool(os.environ.get("ART_JUDGE_MODEL"))


def play_expert(env: Tau2Env, scenario: Scenario) -> Trajectory | CannotDemonstrate:
    """One scenario played by its expert through `env.rollout`: the scored trajectory, or why it could not be."""
    try:
        return asyncio.run(env.rollout(PolicyClient(tau2_expert(env, scenario)), "tau2-expert", scenario))
    except CannotDemonstrate as e:
        return e


def build_tau2_demonstrations(
    domain: str, split: Split = "train", *, limit: int | None = None, out: str | Path | None = None, **options: Any
) -> Demonstrations:
    """Play every task of tau2's `split` with its expert; keep the conversations the environment scores 1.0.

    >>> demos = build_tau2_demonstrations("airline", out="tau2-airline.jsonl")     # doctest: +SKIP
    >>> demos.skip_counts()                                                       # doctest: +SKIP
    """
    env = load_tau2_env(domain, **options)
    demos = Demonstrations(f"tau2-{domain}", split)
    for scenario in env.scenarios(split)[:limit]:
        result = play_expert(env, scenario)
        if isinstance(result, CannotDemonstrate):
            demos.skipped[scenario.id] = str(result)
            continue
        if result.reward != 1.0:
            demos.skipped[scenario.id] = (
                f"the environment scored the expert {result.reward} (r_db {result.metrics['r_db']}, "
                f"r_communicate {result.metrics['r_communicate']}, ended by {result.metadata['stop_reason']})"
            )
            continue
        row = demonstration_row(result, scenario, category=env.scenario_category(scenario))
        if problems := unrevealed_values(row["messages"], row["tools"], free_text=FREE_TEXT):
            raise AssertionError(f"the expert used values the conversation had not shown in {scenario.id}: {problems}")
        demos.rows.append(row)
    if out is not None:
        demos.write_jsonl(out)
    return demos


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", choices=["retail", "airline"], required=True)
    parser.add_argument("--split", default="train", choices=["train", "test"])
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    parser.add_argument("--out", required=True, help="the JSONL file to write")
    parser.add_argument("--data-dir", default=None, help="tau2's data folder (default: the installed package)")
    args = parser.parse_args(argv)
    demos = build_tau2_demonstrations(args.domain, args.split, limit=args.limit, out=args.out, data_dir=args.data_dir)
    print(demos.summary())
    for task_id, reason in demos.skipped.items():
        print(f"  task {task_id}: {reason}")
    print(f"wrote {len(demos.rows)} conversations to {args.out}")


if __name__ == "__main__":
    main()
